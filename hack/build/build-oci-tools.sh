#!/usr/bin/env bash
# The OCI tools of the registry tests and the release (rehearsal), each built from its official Go module into
# a cache keyed by its version (none of these modules has `replace` directives, so `go install module@version`
# works):
#   registry  the CNCF Distribution registry (htpasswd auth, TLS): the tests' registry the node pulls from
#   crane     go-containerregistry's crane: pushes OCI archives, tags, digests, indexes
#   cosign    Sigstore's cosign: signs and verifies images and the chart
# Usage: hack/build/build-oci-tools.sh [TOOL...] (default: all three); prints each tool's binary path, one a
# line, in the order asked. A second run with a binary present is a no-op for that tool.
set -euo pipefail

DISTRIBUTION_VERSION=${DISTRIBUTION_VERSION:-v3.1.2}
CRANE_VERSION=${CRANE_VERSION:-v0.22.1}
COSIGN_VERSION=${COSIGN_VERSION:-v3.1.3}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go caches under MWMS_CACHE
# shellcheck disable=SC1091  # go-install-cached.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"  # go_install_cached

build() {
  local dir
  case $1 in
    registry)
      dir=$(go_install_cached registry "$CACHE_ROOT/registry/$DISTRIBUTION_VERSION" \
        github.com/distribution/distribution/v3 cmd/registry "$DISTRIBUTION_VERSION" LICENSE LICENSE) ;;
    crane)
      dir=$(go_install_cached crane "$CACHE_ROOT/crane/$CRANE_VERSION" \
        github.com/google/go-containerregistry cmd/crane "$CRANE_VERSION" LICENSE LICENSE) ;;
    cosign)
      dir=$(go_install_cached cosign "$CACHE_ROOT/cosign/$COSIGN_VERSION" \
        github.com/sigstore/cosign/v3 cmd/cosign "$COSIGN_VERSION" LICENSE LICENSE) ;;
    *) echo "build-oci-tools: unknown tool $1 (registry, crane, cosign)" >&2; exit 2 ;;
  esac
  echo "$dir/bin/$1"
}

[ $# -gt 0 ] || set -- registry crane cosign
for tool in "$@"; do
  build "$tool"
done
