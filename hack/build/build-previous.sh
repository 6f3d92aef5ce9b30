#!/usr/bin/env bash
# The previous version, for the upgrade test (tests/e2e/test_upgrade.py): its source, chart and images, built
# by that version's own image script, cached by commit. Prints the cache directory on stdout:
#   tree/                the commit's files (`git archive`): its chart is tree/charts/mwms-operator
#   images/<name>.oci.tar its two images, named ghcr.io/mwms-dev/<name>:<tag> (the tag is in image-tag)
#   ref  image-tag       the ref it was built from; the images' tag, <its VERSION>-<short commit>, so they
#                        never take the names of this checkout's images (which may carry the same VERSION)
# Which version: the argument, else the newest release tag (v*) before HEAD, else PINNED: the last commit
# before the upgrade test, until the first release is tagged. A second run with the images present is a
# no-op; a build of another commit replaces the cached one (only one is kept: the trainer archive is ~1 GB).
# Needs the commit in the clone (CI: a checkout with fetch-depth 0), and what `make images` needs.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."

PINNED=df19f23a573fea70b831b1ca3f3bc28b8d7279b7
# shellcheck disable=SC1091  # cache.sh is checked on its own
source hack/build/cache.sh  # CACHE_ROOT
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x .venv/bin/python ] && PYTHON=.venv/bin/python
fi
# Absolute, as the previous version's script runs in its own folder (not resolved: a venv's python is a link).
PYTHON=$(command -v "$PYTHON")
[[ $PYTHON == /* ]] || PYTHON=$PWD/$PYTHON

log() { echo "build-previous: $*" >&2; }

REF=${1:-$(git describe --tags --abbrev=0 --match 'v[0-9]*' HEAD^ 2>/dev/null || echo "$PINNED")}
if ! git rev-parse --verify --quiet "$REF^{commit}" >/dev/null && [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  log "$REF is not in this shallow clone: fetching the whole history"
  git fetch --quiet --unshallow --tags >&2 || log "git fetch --unshallow failed"
fi
COMMIT=$(git rev-parse --verify --quiet "$REF^{commit}") || {
  log "$REF is not in this clone (a shallow checkout? fetch it, or the whole history: git fetch --unshallow)"
  exit 1
}
ROOT="$CACHE_ROOT/previous"
DIR="$ROOT/$COMMIT"
build_needed "$ROOT/lock" test -f "$DIR/image-tag" || { echo "$DIR"; exit 0; }
started=$(date +%s)
# A run cut short leaves the tree and what its image script built, which that script then finds up to date.
if [ ! -d "$DIR/tree" ]; then
  rm -rf "$DIR" && mkdir -p "$DIR/tree.tmp"
  git archive "$COMMIT" | tar -x -C "$DIR/tree.tmp"
  mv "$DIR/tree.tmp" "$DIR/tree"
fi
rm -rf "$DIR/images" && mkdir "$DIR/images"
# Its own image script: hack/build/build-images.sh since the hack/ split, hack/build-images.sh before it.
script=
for candidate in hack/build/build-images.sh hack/build-images.sh; do
  [ -f "$DIR/tree/$candidate" ] && script=$candidate && break
done
[ -n "$script" ] || { log "$REF has no image script"; exit 1; }
log "building the images of $REF ($COMMIT) with its $script"
(cd "$DIR/tree" && PYTHON="$PYTHON" bash "$script") >&2  # stdout says only where the cache is

# Renamed as containerd will read them (io.containerd.image.name, as build-images.sh names them).
TAG="$(cat "$DIR/tree/VERSION")-${COMMIT:0:7}"
for name in mwms-operator mwms-trainer; do
  layout="$DIR/images/$name.oci"
  mkdir -p "$layout"
  tar -x -C "$layout" -f "$DIR/tree/build/images/$name.oci.tar"
  "$PYTHON" hack/build/oci_name.py "$layout" "ghcr.io/mwms-dev/$name:$TAG"
  tar -C "$layout" -cf "$layout.tar.tmp" oci-layout index.json blobs
  mv "$layout.tar.tmp" "$DIR/images/$name.oci.tar"
  rm -rf "$layout"
done
rm -rf "$DIR/tree/build"
echo "$REF" >"$DIR/ref"
echo "$TAG" >"$DIR/image-tag"
find "$ROOT" -mindepth 1 -maxdepth 1 -type d ! -path "$DIR" -exec rm -rf {} +
log "$REF built and cached in $DIR in $(( $(date +%s) - started )) s"
echo "$DIR"
