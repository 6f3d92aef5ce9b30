#!/usr/bin/env bash
# The release's steps, one function each. .github/workflows/release.yml runs them on a tag v<VERSION> against
# GHCR and PyPI; `make release-rehearsal` (tests/e2e/test_release_rehearsal.py) runs the same steps against a
# local registry and a local package index, then installs from those alone as a user would.
#
# Usage: hack/ci/release.sh STEP...
#   check TAG   TAG is v<VERSION>, and CHANGELOG.md has the version's dated entry
#   images      `make images` (linux/amd64), pushed to $REGISTRY/mwms-dev/<image>:<VERSION>
#   chart       the chart packaged and pushed to oci://$REGISTRY/mwms-dev/charts (mwms-operator:<VERSION>)
#   sign        cosign signs every pushed digest: with $COSIGN_KEY, else keylessly (the workflow's identity)
#   verify      cosign verifies every pushed artifact by its tag, as docs/install.md tells users to
#   python      wheels and sdists of mwms-contract and mwms into $DIST/python
#   upload      those uploaded with twine to $INDEX_URL (the workflow publishes them to PyPI itself)
#   files       the rendered manifests and the krew archive, the files the GitHub release carries
# Environment:
#   REGISTRY    the registry in place of ghcr.io (the chart's global.imageRegistry), e.g. 127.0.0.1:5000
#   DIST        where the steps write (default dist/): images.txt and chart.txt (references by digest)
#   COSIGN_KEY, COSIGN_PASSWORD   sign with this key; COSIGN_PUBLIC_KEY verifies with its public half.
#               Neither: keyless, verified against CERTIFICATE_IDENTITY (default: this workflow at the tag)
#               and https://token.actions.githubusercontent.com
#   INDEX_URL, TWINE_USERNAME, TWINE_PASSWORD   the package index of `upload`
#   REHEARSAL=1 an undated CHANGELOG entry is reported, not fatal (the date is written when tagging)
#   PYTHON      a python with `build` and `twine` (default python3); helm, kubectl and cosign on PATH or
#               HELM, KUBECTL, COSIGN (cosign: hack/build/build-oci-tools.sh builds it)
# When GITHUB_OUTPUT is set, each pushed digest is written there too (operator-digest, trainer-digest,
# chart-digest) for the attestation steps.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."

VERSION=$(cat VERSION)
DIST=${DIST:-dist}
PYTHON=${PYTHON:-python3}
HELM=${HELM:-helm}
KUBECTL=${KUBECTL:-kubectl}
ORG=mwms-dev  # the chart's and the operator's image names: ghcr.io/mwms-dev/<image>
log() { echo "release: $*" >&2; }
fail() {
  [ -z "${GITHUB_ACTIONS:-}" ] || echo "::error::$*"  # an annotation on the workflow run
  echo "release: $*" >&2
  exit 1
}
need_registry() { : "${REGISTRY:?set REGISTRY (ghcr.io for a release, the local registry for a rehearsal)}"; }
output() { [ -z "${GITHUB_OUTPUT:-}" ] || echo "$1=$2" >>"$GITHUB_OUTPUT"; }
cosign() { command "${COSIGN:-cosign}" "$@"; }

step_check() {
  local tag=${1:?check needs the tag, e.g. v$VERSION}
  [ "$tag" = "v$VERSION" ] || fail "tag $tag does not match VERSION $VERSION"
  # Keep a Changelog: the released entry carries its date, not `Unreleased`.
  if ! grep -qE "^## \[${VERSION//./\\.}\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$" CHANGELOG.md; then
    local problem="CHANGELOG.md has no dated entry '## [$VERSION] - YYYY-MM-DD' (Unreleased is not)"
    [ "${REHEARSAL:-}" = 1 ] || fail "$problem"
    log "rehearsal: $problem; a release needs it"
  fi
}

# The images `make images` builds and the tests run, pushed by digest; arm64 and the GPU trainer are not
# built by `make images` (see docs/install.md#images).
step_images() {
  need_registry
  bash hack/build/build-images.sh
  mkdir -p "$DIST"
  REGISTRY=$REGISTRY bash hack/build/push-images.sh >"$DIST/images.txt"
  local ref
  while read -r ref; do
    log "pushed $ref"
    case $ref in
      */mwms-operator@*) output operator-digest "${ref#*@}" ;;
      */mwms-trainer@*) output trainer-digest "${ref#*@}" ;;
    esac
  done <"$DIST/images.txt"
}

step_chart() {
  need_registry
  mkdir -p "$DIST"
  "$HELM" package charts/mwms-operator --destination "$DIST" >&2
  "$HELM" push "$DIST/mwms-operator-$VERSION.tgz" "oci://$REGISTRY/$ORG/charts" 2>&1 | tee "$DIST/push.log" >&2
  local digest
  digest=$(sed -n 's/^Digest: //p' "$DIST/push.log")
  [ -n "$digest" ] || fail "helm push printed no digest"
  echo "$REGISTRY/$ORG/charts/mwms-operator@$digest" >"$DIST/chart.txt"
  output chart-digest "$digest"
}

# What this run pushed (the workflow's images and chart jobs each sign and verify their own).
pushed() {
  local file
  for file in "$DIST/images.txt" "$DIST/chart.txt"; do
    [ ! -f "$file" ] || cat "$file"
  done
}

step_sign() {
  local ref
  [ -n "$(pushed)" ] || fail "nothing pushed to sign: run the images or chart step first"
  for ref in $(pushed); do
    log "signing $ref"
    if [ -n "${COSIGN_KEY:-}" ]; then
      # A key of one's own needs no transparency log (a rehearsal's key is thrown away with it): a signing
      # config that names no service, as cosign 3 asks in place of --tlog-upload=false.
      [ -f "$DIST/signing-config.json" ] || cosign signing-config create --out "$DIST/signing-config.json" >&2
      cosign sign --yes --key "$COSIGN_KEY" --signing-config "$DIST/signing-config.json" "$ref" >&2
    else
      cosign sign --yes "$ref" >&2
    fi
  done
}

# What users run (docs/install.md#verifying-a-release): each artifact by its tag, not the digest just pushed.
step_verify() {
  local ref tagged
  for ref in $(pushed); do
    tagged="${ref%@*}:$VERSION"
    log "verifying $tagged"
    if [ -n "${COSIGN_PUBLIC_KEY:-}" ]; then
      cosign verify --key "$COSIGN_PUBLIC_KEY" --insecure-ignore-tlog=true "$tagged" >/dev/null
    else
      local repository=${GITHUB_REPOSITORY:-mwms-dev/mwms-operator}
      cosign verify "$tagged" \
        --certificate-identity "${CERTIFICATE_IDENTITY:-https://github.com/$repository/.github/workflows/release.yml@refs/tags/v$VERSION}" \
        --certificate-oidc-issuer https://token.actions.githubusercontent.com >/dev/null
    fi
  done
}

step_python() {
  local out=$DIST/python file
  rm -rf "$out"
  # contract/ and client/ read VERSION and LICENSE through links to the repository's own.
  "$PYTHON" -m build --outdir "$out" contract >&2
  "$PYTHON" -m build --outdir "$out" client >&2
  for file in "mwms_contract-$VERSION-py3-none-any.whl" "mwms_contract-$VERSION.tar.gz" \
              "mwms-$VERSION-py3-none-any.whl" "mwms-$VERSION.tar.gz"; do
    [ -f "$out/$file" ] || fail "$out/$file was not built: the distributions must carry VERSION ($VERSION)"
  done
  # Not --strict: neither distribution has a long description (its PyPI page would say none was given).
  "$PYTHON" -m twine check "$out"/* >&2
}

step_upload() {
  : "${INDEX_URL:?set INDEX_URL (the package index to upload to)}"
  "$PYTHON" -m twine upload --non-interactive --repository-url "$INDEX_URL" "$DIST/python"/* >&2
}

step_files() {
  mkdir -p "$DIST"
  "$KUBECTL" kustomize manifests/ >"$DIST/mwms-operator.yaml"
  "$KUBECTL" kustomize manifests/mlflow/ >"$DIST/mlflow.yaml"
  "$HELM" template mwms-operator charts/mwms-operator --namespace mwms-system \
    --set mlflow.enabled=true >"$DIST/mwms-operator-chart-rendered.yaml"
  # The krew plugin's archive, byte for byte the one krew/mwms.yaml's sha256 names.
  local sha want
  sha=$("$PYTHON" krew/build.py "$DIST")
  want=$(sed -n 's/^ *sha256: //p' krew/mwms.yaml)
  [ "$sha" = "$want" ] || fail "krew archive sha256 $sha is not krew/mwms.yaml's $want"
  [ -f "$DIST/kubectl-mwms-v$VERSION.tar.gz" ] || fail "no $DIST/kubectl-mwms-v$VERSION.tar.gz"
}

[ $# -gt 0 ] || fail "name the steps to run: check TAG, images, chart, sign, verify, python, upload, files"
while [ $# -gt 0 ]; do
  step=$1
  started=$SECONDS
  shift
  case $step in
    check) step_check "${1:-}"; shift ;;
    images|chart|sign|verify|python|upload|files) "step_$step" ;;
    *) fail "unknown step $step" ;;
  esac
  log "$step: done in $((SECONDS - started)) s"
done
