# Sourced by every build script: one variable, MWMS_CACHE (default ~/.cache/mwms), holds every cache the builds
# fill, so `MWMS_CACHE=$(mktemp -d) make test` is a cold run and `rm -rf` of one folder forgets everything:
#   kubernetes/ control-plane/ node/ kueue/ kwok/ versitygw/ promtool/ peer/  Go-built binaries, keyed by version
#   go/mod go/build  Go's module and build caches, shared by every Go build (one Kubernetes version: the node
#                    reuses what the control plane compiled); go/mod is read-only: `chmod -R u+w` before `rm -rf`
#   images/          buildah's store and the images' wheels (MWMS_IMAGES_CACHE still moves it alone)
#   pip/             pip's download and wheel cache (the venv, the images' wheels, the MLflow-S3 venv)
#   tools/ mlflow-s3/  Helm and kubectl; the tests' MLflow server with boto3
# shellcheck shell=bash
CACHE_ROOT=${MWMS_CACHE:-$HOME/.cache/mwms}
export CACHE_ROOT
export GOMODCACHE="$CACHE_ROOT/go/mod" GOCACHE="$CACHE_ROOT/go/build" PIP_CACHE_DIR="$CACHE_ROOT/pip"

# build_needed LOCK_FILE CHECK...: false when the command CHECK says the build is cached; otherwise takes
# LOCK_FILE (fd 9, held until the script ends) and asks CHECK again, so callers side by side build once.
#   build_needed "$DIR/build.lock" built || { echo "$DIR"; exit 0; }
build_needed() {
  local lock=$1
  shift
  ! "$@" || return 1
  mkdir -p "$(dirname "$lock")"
  exec 9>"$lock"
  flock 9
  ! "$@"
}
