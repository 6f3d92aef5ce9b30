#!/usr/bin/env bash
# Build KWOK ("Kubernetes WithOut Kubelet") from its official Go module (sigs.k8s.io/kwok has no `replace`
# directives, so `go install module@version` works) into a cache keyed by version, next to the control plane's.
# The scale bench (python -m mwms_bench scale) and its smoke test fake nodes and pod lifecycles with it.
# Its default Stages (kustomize/stage) are copied beside it, for reference; ours are in bench/kwok-stages.
# A second run with the binary present is a no-op. Prints the install directory on stdout.
set -euo pipefail

KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
# shellcheck disable=SC1091  # go-install-cached.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"  # go_install_cached
go_install_cached kwok "$CACHE_ROOT/kwok/$KWOK_VERSION" sigs.k8s.io/kwok cmd/kwok "$KWOK_VERSION" kustomize/stage stage
