#!/usr/bin/env bash
# `make images`: builds mwms-operator and mwms-trainer from operator/Dockerfile and trainer/Dockerfile with
# buildah (no daemon) and writes them as OCI archives to build/images/<name>.oci.tar, tagged
# ghcr.io/mwms-dev/<name>:<VERSION> -- the names the chart, the manifests and the operator's default trainer
# image use, so `ctr -n k8s.io images import` (or `kind load image-archive`) makes them usable as they are.
#
# Offline: public base images cannot be pulled here, so the Dockerfiles' BASE_IMAGE is a Debian bookworm root
# filesystem built with mmdebstrap from Debian's packages (bookworm's Python 3.11, like python:3.11-slim-bookworm);
# the wheels of requirements/*.lock.txt are downloaded on the host (pip, PyPI) and mounted into the build, where
# pip still checks every hash. Nothing else differs from a release build.
# Cache (outside the repo), $MWMS_IMAGES_CACHE (default $MWMS_CACHE/images, i.e. ~/.cache/mwms/images):
#   storage/            buildah's images and layers: the base, each Dockerfile's dependency stage (tagged
#                       localhost/mwms-<name>-deps, so it survives pruning) and the two images; everything else
#                       is pruned after each build, so the cache stays at ~7 GB however often the code changes
#   wheels/<lock>-<sha>/ the wheels of one lock file, keyed by its content
# Needs root, buildah and mmdebstrap (Debian packages; .ci/run installs them).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."

VERSION=$(cat VERSION)
REGISTRY=ghcr.io/mwms-dev
OUT=build/images
# shellcheck disable=SC1091  # cache.sh is checked on its own
source hack/build/cache.sh  # CACHE_ROOT; pip downloads the wheels into $CACHE_ROOT/pip
CACHE=${MWMS_IMAGES_CACHE:-$CACHE_ROOT/images}
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
BUILDAH=(buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver overlay)

for tool in buildah mmdebstrap; do
  command -v "$tool" >/dev/null || { echo "make images needs $tool (apt-get install buildah mmdebstrap)" >&2; exit 1; }
done
mkdir -p "$CACHE" "$OUT"
# One build at a time per cache (helpers and CI may share the machine).
exec 9>"$CACHE/lock"
flock 9
# Nothing to do when both archives were built from exactly these inputs (a warm `make demo`/`make test` would
# otherwise spend minutes on buildah's cache checks and prune): every file of the build context (as
# .dockerignore lets through), the Dockerfiles and this script.
inputs_digest() {
  {
    find pyproject.toml VERSION README.md LICENSE .dockerignore requirements/*.lock.txt contract/pyproject.toml \
      contract/VERSION contract/LICENSE contract/mwms_contract operator/mwms_operator trainer/mwms_trainer \
      operator/Dockerfile trainer/Dockerfile hack/build/build-images.sh hack/build/oci_name.py \
      -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
    # A link (contract/VERSION) is hashed by its content above; the same tree under another path is the same.
  } | sha256sum | cut -c1-16
}
INPUTS=$(inputs_digest)
if [ -f "$OUT/mwms-operator.oci.tar" ] && [ -f "$OUT/mwms-trainer.oci.tar" ] && \
  [ "$(cat "$OUT/inputs.sha" 2>/dev/null)" = "$INPUTS" ]; then
  echo "images: $OUT is up to date (inputs $INPUTS)" >&2
  exit 0
fi
rm -f "$OUT/inputs.sha"
# Working containers left by an interrupted build hold their layers mounted; under the lock none is ours.
"${BUILDAH[@]}" rm --all >/dev/null
# The trainer's dependency layer is ~2.8 GB, written twice (stage and image) plus its compressed archive; with
# that stage cached, a rebuild writes our small layer and a new ~1 GB archive. Say so up front instead of
# failing deep inside a commit with ENOSPC.
need_gib=3
"${BUILDAH[@]}" inspect --type image localhost/mwms-trainer-deps:latest >/dev/null 2>&1 || need_gib=10
free_gib=$(( $(df --output=avail -k "$CACHE" | tail -1) / 1024 / 1024 ))
if [ "$free_gib" -lt "$need_gib" ]; then
  echo "make images needs ~${need_gib} GiB free under $CACHE (its filesystem has ${free_gib} GiB); free some," \
    "or point MWMS_IMAGES_CACHE elsewhere" >&2
  exit 1
fi

log() { echo "images: $*" >&2; }
sha() { sha256sum | cut -c1-16; }

# The base: what python:3.11-slim-bookworm provides (Python 3.11 with venv, CA certificates, `python` on PATH),
# from Debian's own packages. Docs, man pages and locales are left out as in the slim image.
# shellcheck disable=SC2054,SC2016  # commas in --include; the hooks' $1 is mmdebstrap's, not ours
BASE_RECIPE=(
  mmdebstrap --quiet --mode=root --variant=minbase --format=tar
  --include=python3.11,python3-venv,ca-certificates
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --customize-hook='ln -sf python3 "$1/usr/bin/python"'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/* "$1"/var/log/*'
  bookworm
)
BASE_MIRRORS=(
  'deb http://deb.debian.org/debian bookworm main'
  'deb http://deb.debian.org/debian bookworm-updates main'
  'deb http://deb.debian.org/debian-security bookworm-security main'
)
BASE=localhost/mwms-base:bookworm-py311-$(printf '%s\n' "${BASE_RECIPE[@]}" "${BASE_MIRRORS[@]}" | sha)

build_base() {
  if "${BUILDAH[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
    return
  fi
  log "building the base $BASE with mmdebstrap (a few minutes, once per recipe)"
  local rootfs="$CACHE/base.tar.tmp" container
  rm -f "$rootfs"
  "${BASE_RECIPE[@]}" "$rootfs" "${BASE_MIRRORS[@]}"
  container=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" add --quiet "$container" "$rootfs" / >/dev/null
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$container"
  "${BUILDAH[@]}" commit --quiet --rm "$container" "$BASE" >/dev/null
  rm -f "$rootfs"
}

# The wheels of one lock file, downloaded with the host's pip (its download cache makes a rerun cheap) for
# the image's platform; the build's pip checks them against the lock's hashes again.
# Wheels that run on bookworm's glibc 2.36 (pip does not widen one --platform to the older manylinux tags).
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
for glibc in $(seq 5 36); do PLATFORMS+=(--platform "manylinux_2_${glibc}_x86_64"); done

wheels_for() {
  local lock=$1 name dir
  name=$(basename "$lock" .lock.txt)
  dir="$CACHE/wheels/$name-$(grep -v "^ *#" "$lock" | sha)"  # comments do not change the wheels
  if [ ! -d "$dir" ]; then
    log "downloading the wheels of $lock"
    rm -rf "$dir.tmp" "$CACHE/wheels/$name"-*
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --require-hashes --no-deps \
      --only-binary=:all: "${PLATFORMS[@]}" --python-version 3.11 --implementation cp --abi cp311 \
      --dest "$dir.tmp" -r "$lock"
    mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

# The ID (config digest) of the image in an OCI archive.
archived_id() {
  "$PYTHON" - "$1" <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    index = json.load(tar.extractfile("index.json"))
    manifest = index["manifests"][0]["digest"].replace(":", "/")
    print(json.load(tar.extractfile(f"blobs/{manifest}"))["config"]["digest"])
PY
}

build_image() {
  local dir=$1 name="mwms-$1" image="$REGISTRY/mwms-$1:$VERSION" wheels build_wheels
  wheels=$(wheels_for "requirements/$dir.lock.txt")
  # Our own wheel is built with setuptools from build.lock.txt.
  build_wheels=$(wheels_for requirements/build.lock.txt)
  log "building $image"
  local build=("${BUILDAH[@]}" build --quiet --layers --network none --pull=never --runtime runc
    --file "$dir/Dockerfile"
    --build-arg "BASE_IMAGE=$BASE" --build-arg "VERSION=$VERSION"
    --build-arg "PIP_INSTALL_OPTIONS=--no-index --find-links=/wheels --find-links=/build-wheels"
    --volume "$wheels:/wheels:ro" --volume "$build_wheels:/build-wheels:ro")
  # The dependency stage under a name of its own keeps it through the prune below (a cache hit when only
  # our code changed); the second build reuses its layers.
  "${build[@]}" --target deps --tag "localhost/$name-deps:latest" . >/dev/null
  "${build[@]}" --tag "$image" . >/dev/null
  # Unchanged image (same ID, i.e. config digest, as the archive's): keep the archive, skip a slow recompress.
  if [ -f "$OUT/$name.oci.tar" ] && [ "$(archived_id "$OUT/$name.oci.tar")" = \
    "$("${BUILDAH[@]}" images --noheading --no-trunc --format '{{.ID}}' "$image")" ]; then
    log "$OUT/$name.oci.tar: $image is up to date"
    return
  fi
  # An OCI layout, named for containerd, then archived aside and renamed: a reader (the node's image import)
  # never sees half an archive.
  rm -rf "$OUT/$name.oci" "$OUT/$name.oci.tar.tmp"
  "${BUILDAH[@]}" push --quiet "$image" "oci:$OUT/$name.oci:$image"
  "$PYTHON" hack/build/oci_name.py "$OUT/$name.oci" "$image"
  tar -C "$OUT/$name.oci" -cf "$OUT/$name.oci.tar.tmp" oci-layout index.json blobs
  mv "$OUT/$name.oci.tar.tmp" "$OUT/$name.oci.tar"
  rm -rf "$OUT/$name.oci"
  log "$OUT/$name.oci.tar: $image ($(du -m "$OUT/$name.oci.tar" | cut -f1) MiB)"
}

build_base
build_image operator
build_image trainer
# Drop what no named image needs: earlier builds' images and stages (GBs per trainer change otherwise).
"${BUILDAH[@]}" rmi --prune >/dev/null
echo "$INPUTS" >"$OUT/inputs.sha"
log "cache $CACHE: $(du -sh "$CACHE/storage" | cut -f1)"
