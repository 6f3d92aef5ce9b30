#!/usr/bin/env bash
# Build Prometheus's promtool from its official Go module (github.com/prometheus/prometheus has no `replace`
# directives, so `go install module@version` works) into a cache keyed by version: the static tier checks the
# chart's alerting rules with `promtool test rules` (tests/static/test_static_monitoring.py).
# A second run with the binary present is a no-op. Prints the bin directory on stdout.
set -euo pipefail

# Prometheus's Go module versions are v0.<major*100+minor>.<patch>: v0.316.0 is Prometheus 3.16.0.
PROMTOOL_VERSION=${PROMTOOL_VERSION:-v0.316.0}
MODULE=github.com/prometheus/prometheus
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
DIR="$CACHE_ROOT/promtool/$PROMTOOL_VERSION"

log() { echo "build-promtool: $*" >&2; }

build_needed "$DIR/build.lock" test -x "$DIR/bin/promtool" || { echo "$DIR/bin"; exit 0; }
command -v go >/dev/null || { log "Go is required to build promtool"; exit 1; }
started=$(date +%s)
log "go install $MODULE/cmd/promtool@$PROMTOOL_VERSION"
rm -rf "$DIR/bin.tmp"
# remove_all_sd leaves out the service-discovery plugins (the cloud providers' SDKs, most of the build): rule
# tests need none of them.
CGO_ENABLED=0 GOFLAGS="-trimpath" GOBIN="$DIR/bin.tmp" go install -tags remove_all_sd -ldflags "-s -w" \
  "$MODULE/cmd/promtool@$PROMTOOL_VERSION" >&2
rm -rf "${DIR:?}/bin" && mv "$DIR/bin.tmp" "$DIR/bin"
log "built in $(( $(date +%s) - started )) s"
echo "$DIR/bin"
