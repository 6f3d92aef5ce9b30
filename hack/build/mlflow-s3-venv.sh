#!/usr/bin/env bash
# A Python environment of its own for the tests' `mlflow server --artifacts-destination s3://...`: MLflow's S3
# artifact store needs boto3, whose botocore requires python-dateutil<3, while the kubernetes client of the
# main environment (.venv) requires python-dateutil>=4. One environment cannot hold both, so this one holds
# only MLflow's server and boto3. Cached under ~/.cache/mwms, keyed by the requirements below; a second run is
# a no-op. Prints the environment's python on stdout.
set -euo pipefail

# The trainer image's versions (it serves the chart's MLflow on the real node), read from its lock.
LOCK="$(dirname "$0")/../../requirements/trainer.lock.txt"
mapfile -t REQUIREMENTS < <(grep -oE '^(mlflow|mlflow-skinny|boto3|botocore|s3transfer)==[^ ]+' "$LOCK")
[ "${#REQUIREMENTS[@]}" -eq 5 ] || { echo "mlflow-s3-venv: mlflow and boto3 not found in $LOCK" >&2; exit 1; }
PYTHON=${PYTHON:-python3}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
KEY=$(printf '%s\n' "${REQUIREMENTS[@]}" "$("$PYTHON" -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-16)
ENV_DIR="$CACHE_ROOT/mlflow-s3/$KEY"

log() { echo "mlflow-s3-venv: $*" >&2; }

if [ -x "$ENV_DIR/bin/python" ] && [ -e "$ENV_DIR/.complete" ]; then
  echo "$ENV_DIR/bin/python"
  exit 0
fi
mkdir -p "$CACHE_ROOT/mlflow-s3"
exec 9>"$CACHE_ROOT/mlflow-s3/build.lock"
flock 9
if [ ! -e "$ENV_DIR/.complete" ]; then
  rm -rf "$ENV_DIR"
  log "creating $ENV_DIR (${REQUIREMENTS[*]})"
  "$PYTHON" -m venv "$ENV_DIR"
  "$ENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}" >&2
  touch "$ENV_DIR/.complete"
fi
echo "$ENV_DIR/bin/python"
