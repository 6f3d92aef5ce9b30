# Two entry points (README): `make demo` runs the seed TrainJob on a local control plane with a real node;
# `make test` sets up and runs the whole suite exactly as CI does. Both build the environment at .venv/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml contract/pyproject.toml client/pyproject.toml tests/kit/pyproject.toml bench/pyproject.toml VERSION | sha1sum | cut -c1-12)
# Every cache the builds fill lives under one folder (hack/cache.sh lists them): MWMS_CACHE=$(mktemp -d) is a
# cold run. pip's cache follows it for the venv too.
export MWMS_CACHE ?= $(HOME)/.cache/mwms
export PIP_CACHE_DIR := $(MWMS_CACHE)/pip

.PHONY: deps-demo deps-test setup builds venv tools control-plane images lock kueue kwok versitygw mlflow-s3 promtool node demo test \
	test-unit test-integration test-node test-kueue lint clean

# The host's prerequisites first (Debian packages, Go, root), so nothing long starts on a machine that lacks
# one: as root the missing packages are installed, otherwise the one apt-get line is printed (hack/install-deps.sh).
deps-demo:
	bash hack/install-deps.sh demo

deps-test:
	bash hack/install-deps.sh test

setup: venv tools control-plane

venv: $(STAMP)

$(STAMP): pyproject.toml contract/pyproject.toml client/pyproject.toml tests/kit/pyproject.toml VERSION
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ./contract -e ./client -e ./tests/kit -e ./bench -e ".[operator,trainer,dev]" --group test --group lint --group lock
	rm -f $(VENV)/.installed-* && touch $@

tools: venv
	bash hack/tools.sh

control-plane:
	bash hack/build-control-plane.sh

# The operator and trainer images from their Dockerfiles, offline, as OCI archives in build/images/
# (hack/build-images.sh; needs root, buildah and mmdebstrap). Cached under ~/.cache/mwms/images.
images: venv
	bash hack/build-images.sh

# Regenerate requirements/*.lock.txt (the images' hash-locked packages) from pyproject's extras.
lock: venv
	PATH="$(VENV)/bin:$$PATH" bash hack/lock.sh

# Kueue for the queueing test (tests/integration/operator/test_operator_kueue.py); cached by version.
kueue:
	bash hack/build-kueue.sh

# KWOK (fake nodes and pod lifecycles) for the scale bench and its smoke test (tests/scale); cached by version.
kwok:
	bash hack/build-kwok.sh

# The Versity S3 Gateway, the real S3-compatible server of the object-storage tests; cached by version.
versitygw:
	bash hack/build-versitygw.sh

# Prometheus's promtool, for the static test of the chart's alerting rules; cached by version.
promtool:
	bash hack/build-promtool.sh

# MLflow's server with boto3, for the tests' S3 artifact store (hack/mlflow-s3-venv.sh says why not in .venv).
mlflow-s3:
	bash hack/mlflow-s3-venv.sh

# A real kubelet node's parts (kubelet, kube-proxy, CNI plugins, CoreDNS, pause and test images).
node:
	bash hack/build-node.sh

# The three long builds side by side: the images' build waits mostly on downloads and disk, the control
# plane's and node's Go builds on CPU (each has its own lock and cache folder; docs/benchmarks.md has the times).
builds: venv tools
	$(MAKE) --no-print-directory -j3 control-plane images node

# The real node runs the images users deploy: `make images` and the node's parts first (both cached).
demo: deps-demo builds
	$(VENV)/bin/mwms demo

# The tiers in two lanes side by side (the cluster tiers, and the CPU-bound ones), Kueue, the S3 server, KWOK,
# promtool and the MLflow-S3 environment built meanwhile; ends with each tier's counts and wall time
# (hack/run-tests.py).
# `.venv/bin/python -m pytest tests` runs the same tests one after another.
test: deps-test builds
	$(PY) hack/run-tests.py $(PYTEST_ARGS)

# The Kueue test alone: real Kueue beside the local control plane (`make test` runs it too).
test-kueue: setup kueue
	$(VENV)/bin/python -m pytest -m kueue tests

# The real-node tier alone (also part of `make test`): a kubelet with containerd (Debian packages: containerd
# runc nftables buildah busybox-static gcc), the project's images from build/images/. The e2e tests (the chart's
# chain, README's install commands) are `node` tests too: they run the images users deploy.
test-node: setup images node
	$(VENV)/bin/python -m pytest -m node tests

test-unit: venv
	$(VENV)/bin/python -m pytest -m "not integration and not e2e and not tf and not static and not images and not node" tests

lint: venv
	$(VENV)/bin/ruff check contract operator trainer dev client tests bench
	$(VENV)/bin/mypy -p mwms_contract -p mwms_operator -p mwms_trainer -p mwms_dev -p mwms

clean:
	-$(VENV)/bin/mwms dev-cluster down
	rm -rf $(VENV) .mwms
