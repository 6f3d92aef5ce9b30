#!/usr/bin/env bash
# Build SeaweedFS's `weed` (the real S3-compatible server the object-storage tests start) from its official Go
# module into a cache keyed by version. github.com/seaweedfs/seaweedfs has a `replace` directive, so
# `go install module@version` refuses it: build inside the module's own directory, as downloaded to the module
# cache (read-only; the binary goes to the cache). No code of it is committed here.
# A second run with the binary present is a no-op. Prints the bin directory on stdout.
set -euo pipefail

SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
BIN_DIR="$CACHE_ROOT/seaweedfs/$SEAWEEDFS_VERSION/bin"
MODULE=github.com/seaweedfs/seaweedfs

log() { echo "build-seaweedfs: $*" >&2; }

if [ -x "$BIN_DIR/weed" ]; then
  echo "$BIN_DIR"
  exit 0
fi
command -v go >/dev/null || { log "Go is required to build weed"; exit 1; }
mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/../build.lock"
flock 9
if [ -x "$BIN_DIR/weed" ]; then
  echo "$BIN_DIR"
  exit 0
fi
started=$(date +%s)
src=$(go mod download -json "$MODULE@$SEAWEEDFS_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
log "go build ./weed in $src"
# nice: the build shares a small machine with whatever else runs there.
(cd "$src" && CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false" nice -n 15 \
  go build -ldflags "-s -w" -o "$BIN_DIR/weed.tmp" ./weed >&2)
mv "$BIN_DIR/weed.tmp" "$BIN_DIR/weed"
elapsed=$(( $(date +%s) - started ))
log "built weed in ${elapsed}s into $BIN_DIR"
printf '{"built": "weed", "seconds": %d, "version": "%s", "date": "%s"}\n' \
  "$elapsed" "$SEAWEEDFS_VERSION" "$(date -u +%FT%TZ)" >>"$BIN_DIR/../build-times.jsonl"
echo "$BIN_DIR"
