#!/usr/bin/env bash
# A Python environment of its own for the release's Python steps and their rehearsal: `build` (wheels and
# sdists), `twine` (uploads), and pypiserver, the rehearsal's package index, with passlib and bcrypt for its
# htpasswd (the tests' OCI registry reads the same bcrypt lines). Kept out of .venv: none of it is the
# project's. bcrypt stays below 5, whose refusal of passwords over 72 bytes breaks passlib 1.7.4's backend
# check. Cached under ~/.cache/mwms, keyed by the pins below; a second run is a no-op. Prints the
# environment's python on stdout.
set -euo pipefail

REQUIREMENTS=(pypiserver==2.4.2 passlib==1.7.4 bcrypt==4.3.0 build==1.6.1 twine==7.0.0)
PYTHON=${PYTHON:-python3}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, pip's cache under MWMS_CACHE
KEY=$(printf '%s\n' "${REQUIREMENTS[@]}" "$("$PYTHON" -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-16)
ENV_DIR="$CACHE_ROOT/release-tools/$KEY"

if [ -x "$ENV_DIR/bin/python" ] && [ -e "$ENV_DIR/.complete" ]; then
  echo "$ENV_DIR/bin/python"
  exit 0
fi
mkdir -p "$CACHE_ROOT/release-tools"
exec 9>"$CACHE_ROOT/release-tools/build.lock"
flock 9
if [ ! -e "$ENV_DIR/.complete" ]; then
  rm -rf "$ENV_DIR"
  echo "release-tools-venv: creating $ENV_DIR (${REQUIREMENTS[*]})" >&2
  "$PYTHON" -m venv "$ENV_DIR"
  "$ENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}" >&2
  touch "$ENV_DIR/.complete"
fi
echo "$ENV_DIR/bin/python"
