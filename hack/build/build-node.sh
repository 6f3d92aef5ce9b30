#!/usr/bin/env bash
# Build what a real local node runs, from official sources, into a cache keyed by version:
#   bin/   kubelet, kube-proxy, coredns (from hack/build/build-kubernetes.sh, the control plane's versions)
#   cni/   the reference CNI plugins bridge, host-local, loopback, portmap (from hack/build/build-kubernetes.sh)
#   images/pause.oci.tar    kubernetes' build/pause/linux/pause.c, static, in an image built from scratch
#   images/coredns.oci.tar  the coredns binary in an image built from scratch
#   images/busybox.oci.tar  Debian's static busybox (sh, nslookup, wget, httpd, ...): the real-node tests' pods
#   images/local-path-provisioner-<version>.oci.tar  rancher's local-path-provisioner (github.com/rancher/
#                           local-path-provisioner), the default StorageClass's provisioner as kind ships it
# Images cannot be pulled here, so both are built with buildah (its own throw-away storage) and later
# imported into the node's containerd, as `kind load` does. containerd and runc come from Debian packages.
# A second run with everything present is a no-op. Prints the cache directory on stdout.
set -euo pipefail

# shellcheck disable=SC1091  # k8s-build.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/k8s-build.sh"  # K8S_VERSION, CACHE_ROOT, the shared Go recipe
# The pause version that kubernetes $K8S_VERSION ships (kubeadm constants).
PAUSE_VERSION=${PAUSE_VERSION:-3.10.2}
# RECIPE changes whenever the way the parts are built changes, so an old cache is not reused.
RECIPE=2
NODE_DIR="$CACHE_ROOT/node/k8s-$K8S_VERSION-cni-$CNI_VERSION-coredns-$COREDNS_VERSION-pause-$PAUSE_VERSION-r$RECIPE"
NODE_COMMANDS=(kubelet kube-proxy coredns)
# Image names as the node's containerd knows them: local builds, so a local name, never an upstream one.
PAUSE_IMAGE="localhost/mwms/pause:$PAUSE_VERSION"
COREDNS_IMAGE="localhost/mwms/coredns:$COREDNS_VERSION"
BUSYBOX_IMAGE="localhost/mwms/busybox:debian"
LOCAL_PATH_IMAGE="localhost/mwms/local-path-provisioner:$LOCAL_PATH_VERSION"
LOCAL_PATH_ARCHIVE="images/local-path-provisioner-$LOCAL_PATH_VERSION.oci.tar"

log() { echo "build-node: $*" >&2; }

wanted=()
for cmd in "${NODE_COMMANDS[@]}"; do wanted+=("bin/$cmd"); done
for plugin in "${CNI_PLUGINS[@]}"; do wanted+=("cni/${plugin#*/}"); done
wanted+=(images/pause.oci.tar images/coredns.oci.tar images/busybox.oci.tar "$LOCAL_PATH_ARCHIVE" images/names.json)
missing=()
for part in "${wanted[@]}"; do [ -s "$NODE_DIR/$part" ] || missing+=("$part"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$NODE_DIR"
  exit 0
fi

[ -x /bin/busybox ] || { log "/bin/busybox is required (apt-get install busybox-static)"; exit 1; }
for tool in go gcc buildah; do
  command -v $tool >/dev/null || { log "$tool is required to build ${missing[*]} (see README)"; exit 1; }
done
mkdir -p "$NODE_DIR/bin" "$NODE_DIR/cni" "$NODE_DIR/images"
take_build_lock "$NODE_DIR/../build.lock" "${BASH_SOURCE[0]}" "$@"
work=$(mktemp -d)
storage="$work/containers"
cleanup() {
  buildah --root "$storage/root" --runroot "$storage/run" rm --all >/dev/null 2>&1 || true
  # buildah's overlay storage leaves mounts behind; unmount them before removing the tree.
  grep -o " $storage/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
has_missing() { [[ " ${missing[*]} " == *" $1 "* ]]; }

# The Go binaries first (minutes cold, in one build shared with the control plane's).
link_cluster_binaries "$NODE_DIR/bin" "${NODE_COMMANDS[@]}"
for plugin in "${CNI_PLUGINS[@]}"; do link_cluster_binaries "$NODE_DIR/cni" "${plugin#*/}"; done

# image_from_scratch NAME OUT_TAR USER ENTRYPOINT_JSON ROOTFS_DIR: a one-layer image of ROOTFS_DIR.
image_from_scratch() {
  local name=$1 out=$2 user=$3 entrypoint=$4 rootfs=$5
  local b=(buildah --root "$storage/root" --runroot "$storage/run" --storage-driver vfs)
  local ctr
  ctr=$("${b[@]}" from scratch)
  "${b[@]}" copy "$ctr" "$rootfs" / >/dev/null
  "${b[@]}" config --entrypoint "$entrypoint" --user "$user" --os linux --arch amd64 "$ctr"
  "${b[@]}" commit --quiet --format oci "$ctr" "$name" >/dev/null
  "${b[@]}" rm "$ctr" >/dev/null
  # An OCI layout named for containerd: `ctr images import` takes the name from io.containerd.image.name
  # (from org.opencontainers.image.ref.name alone it keeps a bare tag under an import-<date> prefix).
  rm -rf "$work/layout"
  "${b[@]}" push --quiet "$name" "oci:$work/layout:$name"
  python3 - "$work/layout/index.json" "$name" <<'PY'
import json, sys
path, name = sys.argv[1:]
index = json.load(open(path))
for manifest in index["manifests"]:
    manifest.setdefault("annotations", {}).update(
        {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name})
json.dump(index, open(path, "w"))
PY
  tar -C "$work/layout" -cf "$out.tmp" oci-layout index.json blobs
  mv "$out.tmp" "$out"
}

if has_missing images/pause.oci.tar; then
  log "building $PAUSE_IMAGE from kubernetes' build/pause/linux/pause.c"
  src=$(k8s_source_dir)/build/pause/linux/pause.c
  mkdir -p "$work/pause-root"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-mwms" -o "$work/pause-root/pause" "$src"
  strip "$work/pause-root/pause"
  image_from_scratch "$PAUSE_IMAGE" "$NODE_DIR/images/pause.oci.tar" 65535:65535 '["/pause"]' "$work/pause-root"
fi

if has_missing images/coredns.oci.tar; then
  log "building $COREDNS_IMAGE"
  mkdir -p "$work/coredns-root"
  cp "$NODE_DIR/bin/coredns" "$work/coredns-root/coredns"
  image_from_scratch "$COREDNS_IMAGE" "$NODE_DIR/images/coredns.oci.tar" 65532:65532 '["/coredns"]' \
    "$work/coredns-root"
fi

if has_missing images/busybox.oci.tar; then
  log "building $BUSYBOX_IMAGE from Debian's busybox-static"
  mkdir -p "$work/busybox-root/bin" "$work/busybox-root/tmp"
  chmod 1777 "$work/busybox-root/tmp"
  cp /bin/busybox "$work/busybox-root/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$work/busybox-root/bin/$applet"
  done
  image_from_scratch "$BUSYBOX_IMAGE" "$NODE_DIR/images/busybox.oci.tar" 65532:65532 '["/bin/sh"]' \
    "$work/busybox-root"
fi

if has_missing "$LOCAL_PATH_ARCHIVE"; then
  log "building $LOCAL_PATH_IMAGE"
  mkdir -p "$work/local-path-root"
  link_cluster_binaries "$work/local-path-root" local-path-provisioner
  rm -f "$NODE_DIR"/images/local-path-provisioner-*.oci.tar  # an older version's, no longer loaded
  image_from_scratch "$LOCAL_PATH_IMAGE" "$NODE_DIR/$LOCAL_PATH_ARCHIVE" 65532:65532 '["/local-path-provisioner"]' \
    "$work/local-path-root"
fi

printf '{"pause": "%s", "coredns": "%s", "busybox": "%s", "local-path-provisioner": "%s"}\n' \
  "$PAUSE_IMAGE" "$COREDNS_IMAGE" "$BUSYBOX_IMAGE" "$LOCAL_PATH_IMAGE" >"$NODE_DIR/images/names.json"

elapsed=$(( $(date +%s) - started ))
log "built ${missing[*]} in ${elapsed}s into $NODE_DIR"
printf '{"built": "%s", "seconds": %d, "k8s": "%s", "cni": "%s", "coredns": "%s", "date": "%s"}\n' \
  "${missing[*]}" "$elapsed" "$K8S_VERSION" "$CNI_VERSION" "$COREDNS_VERSION" "$(date -u +%FT%TZ)" \
  >>"$NODE_DIR/../build-times.jsonl"
echo "$NODE_DIR"
