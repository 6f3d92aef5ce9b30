#!/usr/bin/env bash
# Build every Kubernetes binary we run (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy) from k8s.io/kubernetes in one `go build`, so the packages they share compile once; cached by
# version. hack/build/build-control-plane.sh and hack/build/build-node.sh take their binaries from here.
# A second run with everything present is a no-op. Prints the bin directory on stdout.
set -euo pipefail

# shellcheck disable=SC1091  # k8s-build.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/k8s-build.sh"  # K8S_VERSION, CACHE_ROOT, the shared Go recipe
# RECIPE changes whenever the way the binaries are built changes, so an old cache is not reused.
RECIPE=1
BIN_DIR="$CACHE_ROOT/kubernetes/k8s-$K8S_VERSION-r$RECIPE/bin"

log() { echo "build-kubernetes: $*" >&2; }

missing=()
for cmd in "${K8S_COMMANDS[@]}"; do
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
log "building ${K8S_COMMANDS[*]} from k8s.io/kubernetes $K8S_VERSION (staging modules $STAGING_VERSION)"
build_k8s_commands "$work" "$BIN_DIR" "${K8S_COMMANDS[@]}"
elapsed=$(( $(date +%s) - started ))
log "built ${K8S_COMMANDS[*]} in ${elapsed}s into $BIN_DIR"
printf '{"built": "%s", "seconds": %d, "k8s": "%s", "date": "%s"}\n' \
  "${K8S_COMMANDS[*]}" "$elapsed" "$K8S_VERSION" "$(date -u +%FT%TZ)" >>"$BIN_DIR/../build-times.jsonl"
echo "$BIN_DIR"
