#!/usr/bin/env bash
# Build KWOK ("Kubernetes WithOut Kubelet") from its official Go module into a cache keyed by version and patch,
# next to the control plane's. The scale bench (python -m mwms_bench scale) and its smoke test fake nodes and pod
# lifecycles with it. Its default Stages (kustomize/stage) are copied beside it, for reference; ours are in
# bench/kwok-stages. A second run with the binary present is a no-op. Prints the install directory on stdout.
#
# One patch (kwok-delete-by-uid.patch): KWOK deletes a terminating pod by name alone, so a late delete of a
# worker's pod can remove its successor of the same name, which a real kubelet never does (it deletes by UID).
# The patch adds the UID precondition to its two deletes; a late one then fails with 409 and is dropped.
set -euo pipefail

KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
PATCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kwok-delete-by-uid.patch"
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
DIR="$CACHE_ROOT/kwok/$KWOK_VERSION-$(sha256sum "$PATCH" | cut -c1-12)"
log() { echo "build-kwok: $*" >&2; }

built() { [ -x "$DIR/bin/kwok" ] && [ -e "$DIR/stage" ]; }
build_needed "$DIR/build.lock" built || { echo "$DIR"; exit 0; }
command -v go >/dev/null || { log "Go is required to build kwok"; exit 1; }
started=$(date +%s)
src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/kwok" && chmod -R u+w "$work/kwok"
patch --quiet -d "$work/kwok" -p1 <"$PATCH"
log "go build sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION with $(basename "$PATCH")"
(cd "$work/kwok" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$DIR/bin.tmp/kwok" ./cmd/kwok)
rm -rf "${DIR:?}/stage" && cp -r "$src/kustomize/stage" "$DIR/stage" && chmod -R u+w "$DIR/stage"
rm -rf "${DIR:?}/bin" && mv "$DIR/bin.tmp" "$DIR/bin"
log "built in $(( $(date +%s) - started )) s"
echo "$DIR"
