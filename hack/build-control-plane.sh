#!/usr/bin/env bash
# Build the real Kubernetes control-plane binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler) and etcd from the official Go modules, into a cache keyed by version.
# No Go source is committed: the throw-away modules are generated here, at build time.
# A second run with everything present is a no-op. Prints the bin directory on stdout.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CACHE_ROOT=${MWMS_CACHE:-$HOME/.cache/mwms}
# RECIPE changes whenever the way the binaries are built changes, so an old cache is not reused.
RECIPE=2
BIN_DIR="$CACHE_ROOT/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-r$RECIPE/bin"
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler)

log() { echo "build-control-plane: $*" >&2; }

missing=()
for cmd in "${K8S_COMMANDS[@]}" etcd; do
  [ -x "$BIN_DIR/$cmd" ] || missing+=("$cmd")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { log "Go is required to build ${missing[*]}"; exit 1; }
mkdir -p "$BIN_DIR"
# One build at a time: clusters started in parallel all call this script.
exec 9>"$BIN_DIR/../build.lock"
flock 9
if [ -z "${MWMS_BUILD_LOCKED:-}" ]; then
  MWMS_BUILD_LOCKED=1 exec bash "${BASH_SOURCE[0]}" "$@"  # re-check what is missing now that we hold it
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-trimpath -mod=mod" CGO_ENABLED=0
ldflags="-s -w"
started=$(date +%s)

needs_k8s=0
for cmd in "${K8S_COMMANDS[@]}"; do [[ " ${missing[*]} " == *" $cmd "* ]] && needs_k8s=1; done
if [ $needs_k8s -eq 1 ]; then
  log "building ${K8S_COMMANDS[*]} from k8s.io/kubernetes $K8S_VERSION (staging modules $STAGING_VERSION)"
  mkdir -p "$work/k8s"
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >"$work/k8s.json"
  k8s_dir=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Dir"])' "$work/k8s.json")
  # k8s.io/kubernetes replaces its staging modules with ./staging paths; pin each to its published version.
  staging=$(sed -nE 's#^\s*(k8s\.io/[a-z0-9-]+) => \./staging/.*#\1#p' "$k8s_dir/go.mod" | sort -u)
  {
    echo "module mwms.dev/control-plane-build"
    echo
    sed -nE 's/^go ([0-9.]+)$/go \1/p' "$k8s_dir/go.mod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for mod in $staging; do echo "  $mod => $mod $STAGING_VERSION"; done
    echo ")"
  } >"$work/k8s/go.mod"
  printf 'package tools\n\nimport (\n' >"$work/k8s/tools.go"
  for cmd in "${K8S_COMMANDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd" >>"$work/k8s/tools.go"; done
  printf ')\n' >>"$work/k8s/tools.go"
  sed -i '1i //go:build tools\n' "$work/k8s/tools.go"
  # Stamp the version as the release build does: Helm's kubeVersion checks and `kubectl version` read it.
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  k8s_ldflags="$ldflags"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$work/k8s" && go mod tidy -e >&2 2>/dev/null || true
   cd "$work/k8s" && go get "k8s.io/kubernetes@$K8S_VERSION" >&2
   for cmd in "${K8S_COMMANDS[@]}"; do
     log "  go build $cmd"
     go build -ldflags "$k8s_ldflags" -o "$BIN_DIR/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" >&2
     mv "$BIN_DIR/$cmd.tmp" "$BIN_DIR/$cmd"
   done)
fi

if [[ " ${missing[*]} " == *" etcd "* ]]; then
  log "building etcd from go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  mkdir -p "$work/etcd"
  (cd "$work/etcd"
   printf 'module mwms.dev/etcd-build\n\ngo 1.24\n' >go.mod
   go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
   go build -ldflags "$ldflags" -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
   mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd")
fi

elapsed=$(( $(date +%s) - started ))
log "built ${missing[*]} in ${elapsed}s into $BIN_DIR"
printf '{"built": "%s", "seconds": %d, "k8s": "%s", "etcd": "%s", "date": "%s"}\n' \
  "${missing[*]}" "$elapsed" "$K8S_VERSION" "$ETCD_VERSION" "$(date -u +%FT%TZ)" >>"$BIN_DIR/../build-times.jsonl"
echo "$BIN_DIR"
