# Sourced by the build scripts of the control plane, the node and the Kubernetes binaries: one recipe for every
# binary we build from the official Go modules. No Go source is committed: the throw-away modules are generated
# at build time.
# shellcheck shell=bash

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
export GOFLAGS="-trimpath -mod=mod" CGO_ENABLED=0
GO_LDFLAGS="-s -w"
# Every command hack/build/build-kubernetes.sh builds in one go: the control plane's and the node's.
# shellcheck disable=SC2034  # read by build-kubernetes.sh, which sources this file
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

# build_k8s_commands WORK_DIR BIN_DIR CMD...: build k8s.io/kubernetes/cmd/CMD at $K8S_VERSION into BIN_DIR.
build_k8s_commands() {
  local work=$1 bin_dir=$2
  shift 2
  local mod_dir="$work/k8s" k8s_dir staging minor k8s_ldflags pkg mod cmd
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
  printf '//go:build tools\n\npackage tools\n\nimport (\n' >"$mod_dir/tools.go"
  for cmd in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd" >>"$mod_dir/tools.go"; done
  printf ')\n' >>"$mod_dir/tools.go"
  # Stamp the version as the release build does: Helm's kubeVersion checks and `kubectl version` read it.
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  k8s_ldflags="$GO_LDFLAGS"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$mod_dir" && { go mod tidy -e >&2 2>/dev/null || true; }
   go get "k8s.io/kubernetes@$K8S_VERSION" >&2
   echo "  go build $*" >&2
   mkdir -p "$work/out"
   # One invocation for every command: the packages they share are compiled once.
   go build -ldflags "$k8s_ldflags" -o "$work/out/" "${@/#/k8s.io/kubernetes/cmd/}" >&2
   for cmd in "$@"; do mv "$work/out/$cmd" "$bin_dir/$cmd"; done)
}

# link_k8s_commands BIN_DIR CMD...: put build-kubernetes.sh's CMD binaries into BIN_DIR (built if missing).
link_k8s_commands() {
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
