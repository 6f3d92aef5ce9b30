#!/usr/bin/env bash
# Build Kubeflow's training-operator (the peer `python -m mwms_bench ... --peer` measures ours against) from
# its official Go module into a cache keyed by version. github.com/kubeflow/training-operator has no `replace`
# directives, so `go install module@version` works. Its CRDs come from the same module's manifests/.
# No code of it is committed here. A second run with the binary present is a no-op.
# Prints the install directory on stdout.
set -euo pipefail

TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.8.1}
# shellcheck disable=SC1091  # cache.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"  # CACHE_ROOT, Go and pip caches under MWMS_CACHE
# shellcheck disable=SC1091  # go-install-cached.sh is checked on its own
source "$(dirname "${BASH_SOURCE[0]}")/go-install-cached.sh"  # go_install_cached
# nice: the build shares a small machine with whatever else runs there.
go_install_cached training-operator "$CACHE_ROOT/peer/$TRAINING_OPERATOR_VERSION" \
  github.com/kubeflow/training-operator cmd/training-operator.v1 "$TRAINING_OPERATOR_VERSION" \
  manifests/base/crds crds 15
