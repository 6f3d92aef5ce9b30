#!/usr/bin/env bash
# Build Kubeflow's training-operator (the peer that bench/peer_bench.py measures ours against) from its
# official Go module into a cache keyed by version. github.com/kubeflow/training-operator has no `replace`
# directives, so `go install module@version` works. Its CRDs come from the same module's manifests/.
# No code of it is committed here. A second run with the binary present is a no-op.
# Prints the install directory on stdout.
set -euo pipefail

TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.8.1}
CACHE_ROOT=${MWMS_CACHE:-$HOME/.cache/mwms}
DIR="$CACHE_ROOT/peer/$TRAINING_OPERATOR_VERSION"
MODULE=github.com/kubeflow/training-operator

log() { echo "build-training-operator: $*" >&2; }

if [ -x "$DIR/bin/training-operator.v1" ] && [ -d "$DIR/crds" ]; then
  echo "$DIR"
  exit 0
fi
command -v go >/dev/null || { log "Go is required to build training-operator"; exit 1; }
mkdir -p "$DIR"
exec 9>"$DIR/build.lock"
flock 9
if [ -x "$DIR/bin/training-operator.v1" ] && [ -d "$DIR/crds" ]; then
  echo "$DIR"
  exit 0
fi
started=$(date +%s)
export CGO_ENABLED=0 GOFLAGS="-trimpath"
log "go install $MODULE/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION"
# nice: the build shares a small machine with whatever else runs there.
GOBIN="$DIR/bin.tmp" nice -n 15 go install -ldflags "-s -w" \
  "$MODULE/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION" >&2
src=$(go mod download -json "$MODULE@$TRAINING_OPERATOR_VERSION" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
rm -rf "${DIR:?}/crds" && cp -r "$src/manifests/base/crds" "$DIR/crds" && chmod -R u+w "$DIR/crds"
rm -rf "${DIR:?}/bin" && mv "$DIR/bin.tmp" "$DIR/bin"
log "built in $(( $(date +%s) - started )) s"
echo "$DIR"
