#!/usr/bin/env bash
# Regenerates the images' hash-locked requirements (requirements/*.lock.txt) from pyproject's extras, for
# Linux and Python 3.11 (the images' Python). The same versions resolve for x86_64 and aarch64, and uv writes
# the hashes of every wheel of each version, so one lock serves both release platforms.
# Usage: hack/build/lock.sh [--upgrade]   (`make lock`; uv comes from pyproject's `lock` dependency group)
set -euo pipefail
cd "$(dirname "$0")/../.."
uv=$(command -v uv || echo .venv/bin/uv)
compile() {
  local out=$1
  shift
  # The header keeps the exact command, so Renovate's pip-compile manager can rerun it.
  "$uv" pip compile --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    "$@" -o "requirements/$out"
}
compile operator.lock.txt pyproject.toml --extra operator "$@"
compile trainer.lock.txt pyproject.toml --extra trainer --extra mlflow-s3 "$@"
compile trainer-gpu.lock.txt pyproject.toml --extra trainer --extra mlflow-s3 --extra gpu "$@"
compile build.lock.txt requirements/build.in "$@"
