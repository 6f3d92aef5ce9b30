#!/usr/bin/env bash
# Build Kueue's manager from its official Go module (sigs.k8s.io/kueue has no `replace` directives, so
# `go install module@version` works) into a cache keyed by version, next to the control plane's.
# Its CRDs and webhook configuration come from the same module's config/ directory.
# A second run with the binary present is a no-op. Prints the install directory on stdout.
set -euo pipefail

KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
CACHE_ROOT=${MWMS_CACHE:-$HOME/.cache/mwms}
DIR="$CACHE_ROOT/kueue/$KUEUE_VERSION"

log() { echo "build-kueue: $*" >&2; }

if [ -x "$DIR/bin/kueue" ] && [ -d "$DIR/config" ]; then
  echo "$DIR"
  exit 0
fi
command -v go >/dev/null || { log "Go is required to build Kueue"; exit 1; }
mkdir -p "$DIR"
exec 9>"$DIR/build.lock"
flock 9
if [ -x "$DIR/bin/kueue" ] && [ -d "$DIR/config" ]; then
  echo "$DIR"
  exit 0
fi
started=$(date +%s)
export CGO_ENABLED=0 GOFLAGS="-trimpath"
log "go install sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
GOBIN="$DIR/bin.tmp" go install -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" >&2
src=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
rm -rf "${DIR:?}/config" && cp -r "$src/config" "$DIR/config" && chmod -R u+w "$DIR/config"
rm -rf "${DIR:?}/bin" && mv "$DIR/bin.tmp" "$DIR/bin"
log "built in $(( $(date +%s) - started )) s"
echo "$DIR"
