#!/usr/bin/env bash
# A kind node image built here, as kind builds kindest/node (its images/base Dockerfile, then
# pkg/build/nodeimage), because kindest/node cannot be pulled on an offline machine:
#   - a Debian bookworm root filesystem (mmdebstrap) with systemd, Debian's containerd and runc, iptables and
#     nftables, plus kind's own base files (entrypoint, systemd units, containerd config) from its Go module;
#   - kubelet, kubeadm and kubectl in /usr/bin, the CNI plugins in /opt/cni/bin, /kind/version;
#   - the images kubeadm names (`kubeadm config images list`) under those names, preloaded into the node's
#     containerd store (/var/lib/containerd) as kind does: kube-apiserver, kube-controller-manager,
#     kube-scheduler and kube-proxy around our binaries, etcd at kubeadm's version, CoreDNS and pause from
#     build-node.sh; busybox and local-path-provisioner for the manifests below;
#   - /kind/manifests/default-cni.yaml and default-storage.yaml (python -m mwms_dev.kind_node says what).
# Changed from kind's files for any host: kubelet --fail-cgroupv1=false (kubelet 1.37 refuses cgroup v1
# otherwise) and containerd's restrict_oom_score_adj (a root without CAP_SYS_RESOURCE cannot lower it).
# Cached under $CACHE_ROOT/kind-node/<tag>/: node.tar (a docker-archive, which `docker load` of Docker 20.10
# and `podman load` both read) and image (its name). A second run with both present is a no-op.
# Prints the cache directory on stdout. Needs root, buildah, mmdebstrap, containerd (ctr) and the venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# shellcheck disable=SC1091  # k8s-build.sh is checked on its own
source hack/build/k8s-build.sh  # K8S_VERSION, CACHE_ROOT
PYTHON=${PYTHON:-.venv/bin/python}
# RECIPE changes whenever the way the image is built changes; with the inputs' versions it names the image.
RECIPE=1
MIRRORS=(
  'deb http://deb.debian.org/debian bookworm main'
  'deb http://deb.debian.org/debian bookworm-updates main'
  'deb http://deb.debian.org/debian-security bookworm-security main'
)
# kind's base packages (images/base/Dockerfile) that a node of ours uses, and Debian's containerd and runc.
NODE_PACKAGES=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash
NODE_PACKAGES+=,ca-certificates,curl,jq,procps,containerd,runc
# What kube-proxy runs besides itself (the upstream image is distroless-iptables).
PROXY_PACKAGES=iptables,nftables,conntrack

log() { echo "build-kind-node: $*" >&2; }

kind_dir=$(bash hack/build/build-kind.sh)
kind_version=$(basename "$kind_dir")  # build-kind.sh's cache is keyed by kind's version
k8s_bin=$(bash hack/build/build-kubernetes.sh)
node_dir=$(bash hack/build/build-node.sh)
# The image names kubeadm will ask the node's containerd for.
mapfile -t wanted_images < <("$k8s_bin/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
image_named() {
  local image
  for image in "${wanted_images[@]}"; do [[ "$image" == */"$1":* ]] && { echo "$image"; return; }; done
  log "kubeadm names no $1 image"
  exit 1
}
etcd_image=$(image_named etcd)
etcd_version=v${etcd_image##*:}
etcd_version=${etcd_version%-*}  # registry.k8s.io/etcd:3.7.0-0 is etcd v3.7.0, image build 0
pause_image=$(image_named pause)
node_names=$(cat "$node_dir/images/names.json")
names() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$node_names" "$1"; }
# CoreDNS and pause get kubeadm's names below: only when built from the versions those names carry.
for part in coredns pause; do
  theirs=$(image_named $part) ours=$(names $part)
  [ "${theirs##*:}" = "${ours##*:}" ] || {
    log "kubeadm $K8S_VERSION wants $theirs, build-node.sh builds $ours: align its versions"
    exit 1
  }
done
etcd_bin=$(ETCD_VERSION=$etcd_version bash hack/build/build-control-plane.sh)/etcd

key=$(
  {
    cat "${BASH_SOURCE[0]}" dev/mwms_dev/kind_node.py dev/mwms_dev/local_path.py
    echo "$K8S_VERSION $kind_version $etcd_version $node_dir ${MIRRORS[*]}"
  } | sha256sum | cut -c1-12
)
TAG="$K8S_VERSION-r$RECIPE-$key"
IMAGE="localhost/mwms/kind-node:$TAG"
OUT="$CACHE_ROOT/kind-node/$TAG"
built() { [ -s "$OUT/node.tar" ] && [ -s "$OUT/image" ]; }
built && { echo "$OUT"; exit 0; }
for tool in buildah mmdebstrap ctr containerd setcap; do
  command -v $tool >/dev/null || { log "$tool is required (hack/build/install-deps.sh test)"; exit 1; }
done
[ -x "$PYTHON" ] || { log "$PYTHON is required (make venv)"; exit 1; }
build_needed "$OUT/../build.lock" built || { echo "$OUT"; exit 0; }
mkdir -p "$OUT"
started=$(date +%s)
work=$(mktemp -d)
storage="$work/containers"
B=(buildah --root "$storage/root" --runroot "$storage/run" --storage-driver vfs)
containerd_pid=
cleanup() {
  [ -z "$containerd_pid" ] || kill "$containerd_pid" 2>/dev/null || true
  "${B[@]}" rm --all >/dev/null 2>&1 || true
  grep -o " $work/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# image_of NAME USER ENTRYPOINT ROOTFS_DIR|ROOTFS_TAR OUT_TAR: a one-layer image named for containerd, as an
# OCI archive (file capabilities kept).
image_of() {
  local name=$1 user=$2 entrypoint=$3 rootfs=$4 out=$5 ctr
  ctr=$("${B[@]}" from scratch)
  if [ -d "$rootfs" ]; then "${B[@]}" copy "$ctr" "$rootfs" / >/dev/null; else "${B[@]}" add "$ctr" "$rootfs" / >/dev/null; fi
  "${B[@]}" config --user "$user" --entrypoint "$entrypoint" --os linux --arch amd64 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  "${B[@]}" commit --quiet --rm --format oci "$ctr" "$name" >/dev/null
  rm -rf "$work/layout"
  "${B[@]}" push --quiet "$name" "oci:$work/layout:$name"
  python3 hack/build/oci_name.py "$work/layout" "$name"
  tar -C "$work/layout" -cf "$out" oci-layout index.json blobs
}

log "the node's root filesystem: Debian bookworm with ${NODE_PACKAGES//,/ }"
rootfs="$work/rootfs"
# shellcheck disable=SC2016  # the hook's $1 is mmdebstrap's
mmdebstrap --quiet --mode=root --variant=minbase --format=directory --include="$NODE_PACKAGES" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/* "$1"/var/log/*' \
  bookworm "$rootfs" "${MIRRORS[@]}"

log "kind $kind_version's base files (images/base/files), as its Dockerfile installs them"
base="$kind_dir/base-files"
install -m 0755 "$base"/usr/local/bin/* "$rootfs/usr/local/bin/"
mkdir -p "$rootfs/kind/bin" "$rootfs/LICENSES" "$rootfs/etc/containerd" "$rootfs/etc/systemd/system/kubelet.service.d"
find "$base/kind" -maxdepth 1 -type f -exec install -m 0644 {} "$rootfs/kind/" \;
install -m 0755 "$base"/kind/bin/* "$rootfs/kind/bin/"
install -m 0644 "$base"/LICENSES/* "$rootfs/LICENSES/"
install -m 0644 "$base"/etc/crictl.yaml "$rootfs/etc/"
install -m 0644 "$base"/etc/containerd/* "$rootfs/etc/containerd/"
install -m 0644 "$base"/etc/default/* "$rootfs/etc/default/"
install -m 0644 "$base"/etc/sysctl.d/* "$rootfs/etc/sysctl.d/"
find "$base/etc/systemd/system" -maxdepth 1 -type f -exec install -m 0644 {} "$rootfs/etc/systemd/system/" \;
install -m 0644 "$base"/etc/systemd/system/kubelet.service.d/* "$rootfs/etc/systemd/system/kubelet.service.d/"
# kind's units run containerd from /usr/local/bin; Debian's is in /usr/bin.
for cmd in containerd containerd-shim-runc-v2 ctr; do ln -sf "/usr/bin/$cmd" "$rootfs/usr/local/bin/$cmd"; done
sed -i -E \
  -e "s#^(\s*sandbox_image = ).*#\1\"$pause_image\"#" \
  -e 's#^(\s*restrict_oom_score_adj = ).*#  \# a root without CAP_SYS_RESOURCE cannot lower oom_score_adj below its own\n\1true#' \
  "$rootfs/etc/containerd/config.toml"
grep -q "sandbox_image = \"$pause_image\"" "$rootfs/etc/containerd/config.toml"
sed -i 's#^KUBELET_EXTRA_ARGS=.*#& --fail-cgroupv1=false#' "$rootfs/etc/default/kubelet"
# The default OCI spec of the node's containers, with kind's product-files hook and without rlimits.
chroot "$rootfs" ctr oci spec | python3 -c '
import json, sys
spec = json.load(sys.stdin)
spec.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
spec["process"].pop("rlimits", None)
json.dump(spec, sys.stdout, indent=2)' >"$rootfs/etc/containerd/cri-base.json"
# systemd as kind sets it up: no units but ours, no kmsg, /sbin/init.
find "$rootfs/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$rootfs"/lib/systemd/system/multi-user.target.wants/* "$rootfs"/etc/systemd/system/*.wants/* \
  "$rootfs"/lib/systemd/system/local-fs.target.wants/* "$rootfs"/lib/systemd/system/sockets.target.wants/*udev* \
  "$rootfs"/lib/systemd/system/sockets.target.wants/*initctl* "$rootfs"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$rootfs/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$rootfs/sbin/init"
chroot "$rootfs" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
chroot "$rootfs" systemctl mask systemd-binfmt.service >/dev/null 2>&1
mkdir -p "$rootfs/etc/kubernetes/manifests" "$rootfs/opt/cni/bin"

log "Kubernetes $K8S_VERSION (kubelet, kubeadm, kubectl), the CNI plugins, /kind/version and manifests"
install -m 0755 "$k8s_bin/kubelet" "$k8s_bin/kubeadm" "$k8s_bin/kubectl" "$rootfs/usr/bin/"
install -m 0755 "$node_dir"/cni/* "$rootfs/opt/cni/bin/"
echo "$K8S_VERSION" >"$rootfs/kind/version"
"$PYTHON" -m mwms_dev.kind_node "$rootfs/kind/manifests" "$(names busybox)" "$pause_image" \
  "$(names local-path-provisioner)"

log "the images kubeadm names: ${wanted_images[*]}"
mkdir -p "$work/images"
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  mkdir -p "$work/$cmd/usr/local/bin"
  cp "$k8s_bin/$cmd" "$work/$cmd/usr/local/bin/"
  image_of "$(image_named "$cmd")" 0:0 "[\"/usr/local/bin/$cmd\"]" "$work/$cmd" "$work/images/$cmd.tar"
done
mkdir -p "$work/etcd/usr/local/bin"
cp "$etcd_bin" "$work/etcd/usr/local/bin/"
image_of "$etcd_image" 0:0 '["/usr/local/bin/etcd"]' "$work/etcd" "$work/images/etcd.tar"
# CoreDNS as its upstream image is: non-root, allowed to bind port 53 by a file capability.
mkdir -p "$work/coredns"
cp "$node_dir/bin/coredns" "$work/coredns/coredns"
setcap cap_net_bind_service=+ep "$work/coredns/coredns"
image_of "$(image_named coredns)" 65532:65532 '["/coredns"]' "$work/coredns" "$work/images/coredns.tar"
# shellcheck disable=SC2016  # the hook's $1 is mmdebstrap's
mmdebstrap --quiet --mode=root --variant=minbase --format=tar --include="$PROXY_PACKAGES" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook="install -D -m 0755 '$k8s_bin/kube-proxy' \"\$1/usr/local/bin/kube-proxy\"" \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/* "$1"/var/log/*' \
  bookworm "$work/kube-proxy.rootfs.tar" "${MIRRORS[@]}"
image_of "$(image_named kube-proxy)" 0:0 '["/usr/local/bin/kube-proxy"]' "$work/kube-proxy.rootfs.tar" \
  "$work/images/kube-proxy.tar"

log "preloading them into the node's containerd store, as kind's image build does"
cat >"$work/containerd.toml" <<EOF
version = 2
root = "$rootfs/var/lib/containerd"
state = "$work/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd.sock"
EOF
containerd --config "$work/containerd.toml" --log-level warn >"$work/containerd.log" 2>&1 &
containerd_pid=$!
c=(ctr --address "$work/containerd.sock" --namespace k8s.io)
for _ in $(seq 50); do "${c[@]}" version >/dev/null 2>&1 && break; sleep 0.2; done
for archive in "$work"/images/*.tar "$node_dir/images/pause.oci.tar" "$node_dir/images/busybox.oci.tar" \
  "$node_dir"/images/local-path-provisioner-*.oci.tar; do
  "${c[@]}" images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack \
    "$archive" >/dev/null
done
# pause under the name kubeadm asks for (built from the version that name carries).
"${c[@]}" images tag --force "$(names pause)" "$pause_image" >/dev/null
"${c[@]}" images rm "$(names pause)" >/dev/null
"${c[@]}" images list -q | grep -v '@sha256:' >&2
kill "$containerd_pid" && wait "$containerd_pid" 2>/dev/null || true
containerd_pid=

log "committing $IMAGE"
node=$("${B[@]}" from scratch)
"${B[@]}" copy "$node" "$rootfs" / >/dev/null
# systemd learns it runs in a container from $container, and stops on SIGRTMIN+3.
"${B[@]}" config --env container=docker --stop-signal SIGRTMIN+3 \
  --entrypoint '["/usr/local/bin/entrypoint", "/sbin/init"]' --os linux --arch amd64 "$node"
"${B[@]}" commit --quiet --rm "$node" "$IMAGE" >/dev/null
rm -f "$OUT/node.tar.tmp"
"${B[@]}" push --quiet "$IMAGE" "docker-archive:$OUT/node.tar.tmp:$IMAGE"
mv "$OUT/node.tar.tmp" "$OUT/node.tar"
echo "$IMAGE" >"$OUT/image"
# Earlier recipes' images (~700 MB each) are not used again.
find "$OUT/.." -mindepth 1 -maxdepth 1 -type d ! -name "$TAG" -exec rm -rf {} +
elapsed=$(( $(date +%s) - started ))
log "built $IMAGE in ${elapsed}s ($(du -m "$OUT/node.tar" | cut -f1) MiB) into $OUT"
printf '{"built": "%s", "seconds": %d, "date": "%s"}\n' "$IMAGE" "$elapsed" "$(date -u +%FT%TZ)" \
  >>"$OUT/../build-times.jsonl"
echo "$OUT"
