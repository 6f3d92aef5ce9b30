# Two entry points (README): `make demo` runs the seed TrainJob on a local control plane with a real node;
# `make test` sets up and runs the whole suite exactly as CI does. Both build the environment at .venv/.
# `make help` lists every target: the `## ` comment on its line is its one-line description.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml contract/pyproject.toml client/pyproject.toml tests/kit/pyproject.toml bench/pyproject.toml VERSION | sha1sum | cut -c1-12)
# Every cache the builds fill lives under one folder (hack/build/cache.sh lists them): MWMS_CACHE=$(mktemp -d)
# is a cold run. pip's cache follows it for the venv too.
export MWMS_CACHE ?= $(HOME)/.cache/mwms
export PIP_CACHE_DIR := $(MWMS_CACHE)/pip
.DEFAULT_GOAL := help

.PHONY: help deps-demo deps-test setup builds venv tools control-plane images lock kueue kwok kind kind-node \
	previous versitygw mlflow-s3 promtool node demo test test-unit test-static test-integration test-node test-kueue \
	test-multikueue bench lint clean push-images oci-tools release-rehearsal

help: ## this list
	@awk -F ':.*## ' '/^[a-z][a-z0-9-]*:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The host's prerequisites first, so nothing long starts on a machine that lacks one (hack/build/install-deps.sh).
deps-demo: ## the Debian packages, Go and root that `make demo` needs (installs them as root)
	bash hack/build/install-deps.sh demo

deps-test: ## the same for `make test`
	bash hack/build/install-deps.sh test

setup: venv tools control-plane ## .venv, Helm and kubectl, the control plane's binaries

venv: $(STAMP) ## .venv with the packages of this checkout, editable

$(STAMP): pyproject.toml contract/pyproject.toml client/pyproject.toml tests/kit/pyproject.toml bench/pyproject.toml VERSION
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ./contract -e ./client -e ./tests/kit -e ./bench -e ".[operator,trainer,dev]" --group test --group lint --group lock
	rm -f $(VENV)/.installed-* && touch $@

tools: venv ## the pinned Helm and kubectl, linked into .venv/bin
	bash hack/build/tools.sh

control-plane: ## kube-apiserver, etcd, controller-manager, scheduler (cached by version)
	bash hack/build/build-control-plane.sh

# Needs root, buildah and mmdebstrap. Cached under ~/.cache/mwms/images.
images: venv ## the operator and trainer images, offline, as OCI archives in build/images/
	bash hack/build/build-images.sh

# Where the chart's global.imageRegistry=$(REGISTRY) finds them; with your Docker credentials.
push-images: images ## push build/images/ to REGISTRY=host[:port]; prints each image by digest
	REGISTRY=$(REGISTRY) bash hack/build/push-images.sh

oci-tools: ## the OCI registry, crane, cosign (Go modules) and build/twine/pypiserver (cached by version)
	bash hack/build/build-oci-tools.sh
	bash hack/build/release-tools-venv.sh

# hack/ci/release.sh's steps against a local registry and package index, then an install from those alone on a
# fresh local cluster (tests/e2e/test_release_rehearsal.py; `make test` runs it too).
release-rehearsal: setup images node oci-tools ## the release workflow's steps, rehearsed locally
	$(PY) -m pytest -p no:cacheprovider tests/e2e/test_release_rehearsal.py $(PYTEST_ARGS)

lock: venv ## regenerate requirements/*.lock.txt (the images' hash-locked packages)
	PATH="$(VENV)/bin:$$PATH" bash hack/build/lock.sh

kueue: ## Kueue from its Go module, for the queueing test (cached by version)
	bash hack/build/build-kueue.sh

kwok: ## KWOK (fake nodes) for the scale bench and tests/scale (cached by version)
	bash hack/build/build-kwok.sh

kind: ## kind's CLI from its Go module, with its node's base files (cached by version)
	bash hack/build/build-kind.sh

previous: venv ## the previous version's tree and images, for the upgrade test (cached by commit)
	bash hack/build/build-previous.sh >/dev/null

kind-node: venv ## a kind node image of our Kubernetes build, as kind builds kindest/node (cached)
	bash hack/build/build-kind-node.sh

versitygw: ## the Versity S3 Gateway, the object-storage tests' S3 server (cached by version)
	bash hack/build/build-versitygw.sh

promtool: ## Prometheus's promtool, for the static test of the alerting rules (cached by version)
	bash hack/build/build-promtool.sh

# Not in .venv: hack/build/mlflow-s3-venv.sh says why.
mlflow-s3: ## MLflow's server with boto3, for the tests' S3 artifact store
	bash hack/build/mlflow-s3-venv.sh

node: ## a real kubelet node's parts (kubelet, kube-proxy, CNI plugins, CoreDNS, pause and test images)
	bash hack/build/build-node.sh

# The images' build waits mostly on downloads and disk, the Go builds on CPU; each has its own lock and cache.
builds: venv tools ## control-plane, images and node side by side
	$(MAKE) --no-print-directory -j3 control-plane images node

demo: deps-demo builds ## the seed TrainJob on a local cluster with a real node; prints its MLflow run
	$(VENV)/bin/mwms demo

# The tiers in two lanes side by side, the builds a few tests need meanwhile (hack/ci/run-tests.py); ends with
# each tier's counts and wall time. `.venv/bin/python -m pytest tests` runs the same tests one after another.
test: deps-test builds ## every tier, as CI runs it
	$(PY) hack/ci/run-tests.py $(PYTEST_ARGS)

# A tier is a folder under tests/ (its conftest marks its tests): each target runs its folders.
test-unit: venv ## the unit tier: pure code, fast
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-static: venv tools ## the static tier: linters and validators over the chart, manifests, workflows
	$(PY) -m pytest tests/static $(PYTEST_ARGS)

test-integration: setup images node ## the integration tier: the real control plane and a real node
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

test-node: setup images node ## the node and e2e tiers: the images on a real kubelet node
	$(PY) -m pytest tests/node tests/e2e $(PYTEST_ARGS)

test-kueue: setup kueue ## the Kueue tests alone: real Kueue beside the local control plane
	$(PY) -m pytest -m kueue tests/integration $(PYTEST_ARGS)

test-multikueue: setup images node kueue ## the MultiKueue tier: a manager and a worker control plane
	$(PY) -m pytest tests/multikueue $(PYTEST_ARGS)

# Scenarios and their options: `make bench` alone lists them; each run appends its record to bench/results/.
bench: venv ## one benchmark: make bench SCENARIO=scale BENCH_ARGS='--pods 1000'; SCENARIO=report renders the page
	$(PY) -m mwms_bench $(or $(SCENARIO),--help) $(BENCH_ARGS)

lint: venv ## ruff and mypy
	$(VENV)/bin/ruff check contract operator trainer dev client tests bench
	$(VENV)/bin/mypy -p mwms_contract -p mwms_operator -p mwms_trainer -p mwms_dev -p mwms

clean: ## stop a local cluster left running, remove .venv and .mwms
	-$(VENV)/bin/mwms dev-cluster down
	rm -rf $(VENV) .mwms
