#!/usr/bin/env bash
# The real Kubernetes control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler, from
# hack/build/build-kubernetes.sh) and etcd built from its official Go module, into a cache keyed by version.
# A second run with everything present is a no-op. Prints the bin directory on stdout.
set -euo pipefail

# shellcheck disable=SC1091  # k8s-build.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/k8s-build.sh"  # K8S_VERSION, CACHE_ROOT, the shared Go recipe
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
# RECIPE changes whenever the way the binaries are built changes, so an old cache is not reused.
RECIPE=3
BIN_DIR="$CACHE_ROOT/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-r$RECIPE/bin"
CONTROL_PLANE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler)

log() { echo "build-control-plane: $*" >&2; }

missing=()
for cmd in "${CONTROL_PLANE_COMMANDS[@]}" etcd; do
  [ -x "$BIN_DIR/$cmd" ] || missing+=("$cmd")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { log "Go is required to build ${missing[*]}"; exit 1; }
mkdir -p "$BIN_DIR"
take_build_lock "$BIN_DIR/../build.lock" "${BASH_SOURCE[0]}" "$@"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

needs_k8s=0
for cmd in "${CONTROL_PLANE_COMMANDS[@]}"; do [[ " ${missing[*]} " == *" $cmd "* ]] && needs_k8s=1; done
if [ $needs_k8s -eq 1 ]; then
  link_cluster_binaries "$BIN_DIR" "${CONTROL_PLANE_COMMANDS[@]}"
fi

if [[ " ${missing[*]} " == *" etcd "* ]]; then
  log "building etcd from go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  mkdir -p "$work/etcd"
  (cd "$work/etcd"
   printf 'module mwms.dev/etcd-build\n\ngo 1.24\n' >go.mod
   go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
   go build -ldflags "$GO_LDFLAGS" -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
   mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd")
fi

elapsed=$(( $(date +%s) - started ))
log "built ${missing[*]} in ${elapsed}s into $BIN_DIR"
printf '{"built": "%s", "seconds": %d, "k8s": "%s", "etcd": "%s", "date": "%s"}\n' \
  "${missing[*]}" "$elapsed" "$K8S_VERSION" "$ETCD_VERSION" "$(date -u +%FT%TZ)" >>"$BIN_DIR/../build-times.jsonl"
echo "$BIN_DIR"
