#!/usr/bin/env bash
# Build every Go binary the local cluster runs but etcd (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, CoreDNS, local-path-provisioner, the CNI plugins; kubeadm and kubectl
# for the kind node) in one `go build`, so the packages they share compile once; cached by version.
# build-control-plane.sh, build-node.sh and build-kind-node.sh beside it take their binaries from here.
# A second run with everything present is a no-op. Prints the bin directory on stdout.
set -euo pipefail

# shellcheck disable=SC1091  # k8s-build.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/k8s-build.sh"  # K8S_VERSION, CACHE_ROOT, the shared Go recipe
# RECIPE changes whenever the way the binaries are built changes, so an old cache is not reused.
RECIPE=2
VERSIONS="k8s-$K8S_VERSION-coredns-$COREDNS_VERSION-local-path-$LOCAL_PATH_VERSION-cni-$CNI_VERSION"
BIN_DIR="$CACHE_ROOT/kubernetes/$VERSIONS-r$RECIPE/bin"

log() { echo "build-kubernetes: $*" >&2; }

missing=()
for cmd in "${CLUSTER_BINARIES[@]}"; do
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
log "building ${CLUSTER_BINARIES[*]} ($VERSIONS, staging modules $STAGING_VERSION)"
build_cluster_binaries "$work" "$BIN_DIR"
elapsed=$(( $(date +%s) - started ))
log "built ${CLUSTER_BINARIES[*]} in ${elapsed}s into $BIN_DIR"
printf '{"built": "%s", "seconds": %d, "versions": "%s", "date": "%s"}\n' \
  "${CLUSTER_BINARIES[*]}" "$elapsed" "$VERSIONS" "$(date -u +%FT%TZ)" >>"$BIN_DIR/../build-times.jsonl"
echo "$BIN_DIR"
