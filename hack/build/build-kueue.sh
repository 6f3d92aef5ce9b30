#!/usr/bin/env bash
# Build Kueue's manager from its official Go module (sigs.k8s.io/kueue has no `replace` directives, so
# `go install module@version` works) into a cache keyed by version, next to the control plane's.
# Its CRDs and webhook configuration come from the same module's config/ directory.
# A second run with the binary present is a no-op. Prints the install directory on stdout.
set -euo pipefail

KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
# shellcheck disable=SC1091  # go-install-cached.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"  # go_install_cached
go_install_cached kueue "$CACHE_ROOT/kueue/$KUEUE_VERSION" sigs.k8s.io/kueue cmd/kueue "$KUEUE_VERSION" config config
