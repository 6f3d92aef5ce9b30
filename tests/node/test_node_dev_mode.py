"""Development mode on the real node (mwms_dev.devmode): the chart's operator and a TrainJob's trainer
run the mounted checkout's code, not their image's copy, so a change takes effect with no image rebuild.

The mount here is a copy of the checkout's packages whose operator and trainer print a marker at import: the
changed code must show in both containers' logs. The dev operator is a second release of the chart in a
privileged namespace of its own (hostPath needs it), watching only that namespace; the job runs in another
privileged namespace, reconciled by the tier's chart operator (`node_chain`), which passes its template on."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwms_dev.devmode import DEV_MOUNT, PRIVILEGED, dev_mode_template, dev_mode_values
from mwms_kit.trainjobs import trainjob

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def changed_checkout() -> Iterator[tuple[Path, str]]:
    """A copy of the packages with a one-line change; not under pytest's tmp dirs (0700), since the images'
    user (uid 65532) must read it."""
    root = Path(tempfile.mkdtemp(prefix="mwms-dev-"))
    root.chmod(0o755)
    marker = f"dev-mode-{uuid.uuid4().hex[:8]}"
    try:
        for package in ("contract/mwms_contract", "operator/mwms_operator", "trainer/mwms_trainer"):
            shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
        for package in ("operator/mwms_operator", "trainer/mwms_trainer"):
            init = root / package / "__init__.py"
            init.write_text(init.read_text() + f"\nprint({marker!r}, __file__, flush=True)\n")
        yield root, marker
    finally:
        shutil.rmtree(root)


def test_operator_and_workers_run_the_mounted_checkout(node_kubectl, node_chain, changed_checkout):
    root, marker = changed_checkout
    with node_kubectl.fresh_namespace("dev") as operator_ns, node_kubectl.fresh_namespace("devjob") as job_ns:
        for namespace in (operator_ns, job_ns):
            node_kubectl("label", "namespace", namespace, "--overwrite", PRIVILEGED)
        chain = dataclasses.replace(
            node_chain,
            release="mwms-dev",
            operator_namespace=operator_ns,
            job_namespace=job_ns,
            # The tier's release owns the CRD; watching only its own namespace, this operator leaves the
            # job to the tier's operator (two operators on one job would fight).
            helm_values=[
                "crds.enabled=false",
                "replicaCount=1",
                f"operator.watchNamespaces={{{operator_ns}}}",
                *dev_mode_values(root),
            ],
        )
        chain.install_chart()
        try:
            pod = node_kubectl.json(
                "get", "pods", "-n", operator_ns, "-l", "app.kubernetes.io/component=operator"
            )["items"][0]["metadata"]["name"]
            log = node_kubectl("logs", "-n", operator_ns, pod).stdout  # Ready: it has imported itself
            assert f"{marker} {DEV_MOUNT}/operator/mwms_operator/__init__.py" in log, log
            imported = node_kubectl(
                "exec", "-n", operator_ns, pod, "--", "python", "-c",
                "import mwms_contract; print(mwms_contract.__file__)",
            ).stdout  # fmt: skip
            assert imported.strip() == f"{DEV_MOUNT}/contract/mwms_contract/__init__.py"

            name = "dev-mode"
            node_kubectl.apply(
                trainjob(
                    name,
                    1,
                    namespace=job_ns,
                    trainer={"dataset": "synthetic", "syntheticSamples": 256, "epochs": 2},
                    template=dev_mode_template(root),
                )
            )
            chain.wait_succeeded(name)  # the chief's container has ended: its log is complete
            worker_log = node_kubectl("logs", "-n", job_ns, f"{name}-worker-0").stdout
            assert f"{marker} {DEV_MOUNT}/trainer/mwms_trainer/__init__.py" in worker_log, worker_log
        finally:
            chain.uninstall()
