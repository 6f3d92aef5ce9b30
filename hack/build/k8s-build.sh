# Sourced by the build scripts of the control plane, the node and the local cluster's binaries: one recipe for
# every binary we build from the official Go modules. No Go source is committed: the throw-away modules are
# generated at build time.
# shellcheck shell=bash

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
CNI_VERSION=${CNI_VERSION:-v1.9.1}
# The CoreDNS version that kubernetes $K8S_VERSION ships (cluster/addons/dns).
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.6}
# The version the Go module proxy serves; the node's image archive is named for it.
LOCAL_PATH_VERSION=${LOCAL_PATH_VERSION:-v0.0.30}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
export GOFLAGS="-trimpath -mod=mod" CGO_ENABLED=0
GO_LDFLAGS="-s -w"
# What build-kubernetes.sh builds in one `go build`, so the packages they share (client-go above all) compile
# once: the control plane's and the node's Kubernetes commands (with kubeadm and kubectl for the kind node
# image, build-kind-node.sh), CoreDNS, the volume provisioner and the CNI plugins.
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubeadm kubectl)
CNI_PLUGINS=(main/bridge ipam/host-local main/loopback meta/portmap)
CLUSTER_BINARIES=("${K8S_COMMANDS[@]}" coredns local-path-provisioner "${CNI_PLUGINS[@]#*/}")
# CoreDNS with the plugins our Corefiles and kind's use, not its cloud back-ends (CoreDNS's documented way to
# choose plugins at compile time: a main package that imports them and sets the directive order).
COREDNS_PLUGINS=(reload ready health metrics errors log loadbalance cache kubernetes loop forward)
COREDNS_DIRECTIVES=(reload ready health prometheus errors log loadbalance cache kubernetes loop forward)

# coredns_main DIR: the main package of our CoreDNS in DIR.
coredns_main() {
  local dir=$1 plugin directive
  mkdir -p "$dir"
  {
    printf 'package main\n\nimport (\n\t"github.com/coredns/coredns/core/dnsserver"\n'
    printf '\t"github.com/coredns/coredns/coremain"\n'
    for plugin in "${COREDNS_PLUGINS[@]}"; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$plugin"; done
    printf ')\n\nfunc init() {\n\tdnsserver.Directives = []string{\n'
    for directive in "${COREDNS_DIRECTIVES[@]}"; do printf '\t\t"%s",\n' "$directive"; done
    printf '\t}\n}\n\nfunc main() { coremain.Run() }\n'
  } >"$dir/main.go"
}

# build_cluster_binaries WORK_DIR BIN_DIR: every binary of CLUSTER_BINARIES into BIN_DIR, from one module that
# requires k8s.io/kubernetes $K8S_VERSION (its staging modules pinned to $STAGING_VERSION) and the others.
build_cluster_binaries() {
  local work=$1 bin_dir=$2
  local mod_dir="$work/k8s" k8s_dir staging minor ldflags pkg mod name packages=()
  mkdir -p "$mod_dir"
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >"$work/k8s.json"
  k8s_dir=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Dir"])' "$work/k8s.json")
  # k8s.io/kubernetes replaces its staging modules with ./staging paths; pin each to its published version.
  staging=$(sed -nE 's#^\s*(k8s\.io/[a-z0-9-]+) => \./staging/.*#\1#p' "$k8s_dir/go.mod" | sort -u)
  {
    echo "module mwms.dev/k8s-build"
    echo
    sed -nE 's/^go ([0-9.]+)$/go \1/p' "$k8s_dir/go.mod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for mod in $staging; do echo "  $mod => $mod $STAGING_VERSION"; done
    echo ")"
  } >"$mod_dir/go.mod"
  coredns_main "$mod_dir/coredns"
  for name in "${K8S_COMMANDS[@]}"; do packages+=("k8s.io/kubernetes/cmd/$name"); done
  packages+=(./coredns)
  for name in "${CNI_PLUGINS[@]}"; do packages+=("github.com/containernetworking/plugins/plugins/$name"); done
  # Stamp the version as the release build does: Helm's kubeVersion checks and `kubectl version` read it.
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ldflags="$GO_LDFLAGS"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$mod_dir" || exit
   go get "k8s.io/kubernetes@$K8S_VERSION" "github.com/coredns/coredns@$COREDNS_VERSION" \
     "github.com/rancher/local-path-provisioner@$LOCAL_PATH_VERSION" \
     "github.com/containernetworking/plugins@$CNI_VERSION" >&2
   echo "  go build ${CLUSTER_BINARIES[*]}" >&2
   mkdir -p "$work/out"
   # No DWARF: the binaries are stripped anyway (-s -w), and the compiler is spared writing it.
   go build -gcflags=all=-dwarf=false -ldflags "$ldflags" -o "$work/out/" "${packages[@]}" >&2
   # A build of its own: it imports logrus as github.com/Sirupsen/logrus, which may not meet the lower-case
   # path in one build; the packages it shares come from the build cache.
   go build -gcflags=all=-dwarf=false -ldflags "$ldflags" -o "$work/out/" github.com/rancher/local-path-provisioner >&2
   for name in "${CLUSTER_BINARIES[@]}"; do mv "$work/out/$name" "$bin_dir/$name"; done)
}

# link_cluster_binaries BIN_DIR NAME...: put build-kubernetes.sh's NAME binaries into BIN_DIR (built if
# missing).
link_cluster_binaries() {
  local bin_dir=$1 k8s_bin cmd
  shift
  # Its own lock, not the caller's: a caller holding its lock exports MWMS_BUILD_LOCKED.
  k8s_bin=$(env -u MWMS_BUILD_LOCKED bash "$(dirname "${BASH_SOURCE[0]}")/build-kubernetes.sh")
  for cmd in "$@"; do
    ln -f "$k8s_bin/$cmd" "$bin_dir/$cmd.tmp" 2>/dev/null || cp "$k8s_bin/$cmd" "$bin_dir/$cmd.tmp"
    mv "$bin_dir/$cmd.tmp" "$bin_dir/$cmd"
  done
}

# k8s_source_dir: where the Go module cache holds k8s.io/kubernetes at $K8S_VERSION (downloads it if needed).
k8s_source_dir() {
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

# take_build_lock LOCK_FILE SCRIPT ARGS...: one build at a time (parallel clusters all call the build
# scripts); re-runs SCRIPT once the lock is held, so it re-checks what is still missing.
take_build_lock() {
  local lock=$1
  shift
  exec 9>"$lock"
  flock 9
  if [ -z "${MWMS_BUILD_LOCKED:-}" ]; then
    MWMS_BUILD_LOCKED=1 exec bash "$@"
  fi
}
