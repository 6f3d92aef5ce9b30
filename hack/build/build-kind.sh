#!/usr/bin/env bash
# Build the kind CLI from its official Go module (sigs.k8s.io/kind has no `replace` directives, so
# `go install module@version` works) into a cache keyed by version, as build-kwok.sh does for KWOK.
# kind's base-image files (images/base/files: the node's entrypoint, systemd units, containerd config) are
# copied beside it: build-kind-node.sh builds our node image from them.
# A second run with the binary present is a no-op. Prints the install directory on stdout.
set -euo pipefail

KIND_VERSION=${KIND_VERSION:-v0.33.0}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
# shellcheck disable=SC1091  # go-install-cached.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"  # go_install_cached
go_install_cached kind "$CACHE_ROOT/kind/$KIND_VERSION" sigs.k8s.io/kind . "$KIND_VERSION" images/base/files base-files
