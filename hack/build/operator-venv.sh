#!/usr/bin/env bash
# The operator image's Python environment outside the image: requirements/operator.lock.txt alone, installed
# as operator/Dockerfile installs it. The benches run the operator with it, so its memory is the image's:
# kopf imports the kubernetes client whenever it is installed (.venv has it, for the client and the tests),
# about 30 MiB the image never loads. Cached under ~/.cache/mwms, keyed by the lock and Python's version; a
# second run is a no-op. Prints the environment's python on stdout.
set -euo pipefail

LOCK="$(cd "$(dirname "$0")/../.." && pwd)/requirements/operator.lock.txt"
PYTHON=${PYTHON:-python3}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, build_needed, pip's cache under MWMS_CACHE
KEY=$({ cat "$LOCK"; "$PYTHON" -c 'import sys; print(sys.version_info[:2])'; } | sha256sum | cut -c1-16)
ENV_DIR="$CACHE_ROOT/operator-venv/$KEY"

built() { [ -x "$ENV_DIR/bin/python" ] && [ -e "$ENV_DIR/.complete" ]; }
if build_needed "$CACHE_ROOT/operator-venv/build.lock" built; then
  rm -rf "$ENV_DIR"
  echo "operator-venv: creating $ENV_DIR from $LOCK" >&2
  "$PYTHON" -m venv "$ENV_DIR"
  "$ENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
    -r "$LOCK" >&2
  touch "$ENV_DIR/.complete"
fi
echo "$ENV_DIR/bin/python"
