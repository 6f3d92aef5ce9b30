#!/usr/bin/env bash
# `make push-images REGISTRY=host[:port]`: pushes the OCI archives `make images` wrote (build/images/*.oci.tar,
# or ARCHIVES) to REGISTRY in place of their own registry, as the chart's `global.imageRegistry` rewrites the
# references it runs: ghcr.io/mwms-dev/mwms-trainer:<version> goes to $REGISTRY/mwms-dev/mwms-trainer:<version>.
# Prints each pushed reference by digest (`$REGISTRY/mwms-dev/<image>@sha256:...`), one a line.
# Credentials: those of `crane auth login $REGISTRY` or `docker login` ($DOCKER_CONFIG/config.json); a registry
# whose certificate a private CA signed: SSL_CERT_FILE. crane comes from hack/build/build-oci-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${REGISTRY:?set REGISTRY=host[:port] (the registry to push to: the chart global.imageRegistry)}"
REGISTRY=${REGISTRY%/}
CRANE=$(bash hack/build/build-oci-tools.sh crane)
read -r -a archives <<<"${ARCHIVES:-$(echo build/images/*.oci.tar)}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for archive in "${archives[@]}"; do
  [ -f "$archive" ] || { echo "push-images: $archive not found: run \`make images\` first" >&2; exit 1; }
  layout="$work/$(basename "$archive" .oci.tar)"
  mkdir -p "$layout"
  tar -C "$layout" -xf "$archive"
  # The name the archive carries (io.containerd.image.name, written by hack/oci_name.py).
  name=$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["manifests"][0]["annotations"]["io.containerd.image.name"])' \
    "$layout/index.json")
  first=${name%%/*}
  path=$name
  # Its registry goes when the first component names a host (a dot or a port, or localhost), as Docker reads it.
  if [[ $name == */* && ( $first == *.* || $first == *:* || $first == localhost ) ]]; then
    path=${name#*/}
  fi
  "$CRANE" push "$layout" "$REGISTRY/$path" >&2
  digest=$("$CRANE" digest "$REGISTRY/$path")
  echo "$REGISTRY/${path%:*}@$digest"
done
