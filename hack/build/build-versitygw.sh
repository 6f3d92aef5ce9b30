#!/usr/bin/env bash
# Build the Versity S3 Gateway (`versitygw`, the real S3-compatible server the object-storage tests start: its
# posix backend serves a directory as buckets, with SigV4 auth and multipart uploads) from its official Go
# module (github.com/versity/versitygw has no `replace` directives, so `go install module@version` works) into
# a cache keyed by version. About 3 CPU-minutes cold, where SeaweedFS's `weed` took ~25.
# A second run with the binary present is a no-op. Prints the install directory on stdout.
set -euo pipefail

VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
# shellcheck disable=SC1091  # go-install-cached.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"  # go_install_cached
# No extra nice: `make test` builds it beside the tests at the compute lane's priority, and three tiers'
# object-storage tests wait for it.
go_install_cached versitygw "$CACHE_ROOT/versitygw/$VERSITYGW_VERSION" github.com/versity/versitygw \
  cmd/versitygw "$VERSITYGW_VERSION" LICENSE LICENSE
