"""README's "On a real cluster" section on kind, run as users run it: hack/ci/kind-e2e.sh reads the section's
first block and its Helm block from README.md and runs them command by command, as
.github/workflows/e2e-kind.yml does; here with our node image (KIND_NODE_IMAGE). `make images`, kind creates
the cluster, `kind load image-archive` imports both OCI archives, the chart installs with its bundled MLflow,
the seed job ends Succeeded and the `mwms` verbs show it and its run.

One step is this machine's, not README's: nothing can be pulled here, so before the chart goes in, the MLflow
image the chart names is our trainer image tagged so in the node's containerd (it holds the same `mlflow`
server), as the real node's README test does. By hand, run it under `flock /tmp/mwms-node.lock`."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.timeout(3600)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "ci" / "kind-e2e.sh"
NODE = "mwms-control-plane"  # README's cluster `mwms`, one node


def kind_e2e(env: dict[str, str], *args: str) -> str:
    """The script's stdout; fails with both streams when a command fails."""
    done = subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, (
        f"kind-e2e.sh {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def test_the_script_runs_readmes_kind_commands_and_the_users_workflow_runs_the_script():
    """What the script runs, so a change to README's blocks is a decision, not a silent addition."""
    cluster, job = (kind_e2e({}, "--print", block).splitlines() for block in ("cluster", "job"))
    assert cluster == [
        "make images",
        'kind create cluster --name mwms --image "${KIND_NODE_IMAGE:-kindest/node:v1.37.0}" --wait 3m',
        "kind load image-archive build/images/mwms-operator.oci.tar --name mwms",
        "kind load image-archive build/images/mwms-trainer.oci.tar --name mwms",
    ]
    assert (
        job[0].startswith("helm install mwms charts/mwms-operator") and "--set mlflow.enabled=true" in job[0]
    )
    assert "kubectl apply -f manifests/samples/seed-breast-cancer.yaml" in job
    assert [c.split()[1] for c in job if c.startswith("mwms ")] == ["wait", "list", "runs"]
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "e2e-kind.yml").read_text())
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert any(run.strip() == "bash hack/ci/kind-e2e.sh" for run in runs), runs


def mlflow_image() -> str:
    image = yaml.safe_load((REPO / "charts" / "mwms-operator" / "values.yaml").read_text())["mlflow"]["image"]
    return f"{image['repository']}:{image['tag']}"


@pytest.fixture
def kind_cluster(kind_env: dict[str, str], container_engine: str) -> Iterator[dict[str, str]]:
    """README's first block; the cluster deleted afterwards, once what ran on it is printed."""
    try:
        kind_e2e(kind_env, "cluster")
        yield kind_env
    finally:
        admin = [container_engine, "exec", NODE, "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf"]
        subprocess.run([*admin, "get", "nodes,pods,trainjobs.mwms.dev", "-A", "-o", "wide"], check=False)
        subprocess.run(["kind", "delete", "cluster", "--name", "mwms"], env=kind_env, check=False)


def test_readme_on_kind_with_our_node_image(kind_cluster: dict[str, str], container_engine: str):
    images = [container_engine, "exec", NODE, "ctr", "--namespace=k8s.io", "images"]
    loaded = subprocess.run(
        [*images, "list", "-q"], capture_output=True, text=True, check=True
    ).stdout.split()
    operator, trainer = (
        next(name for name in loaded if re.search(rf"/mwms-{part}:[^@]+$", name))
        for part in ("operator", "trainer")
    )
    assert operator.startswith("ghcr.io/mwms-dev/"), "kind load kept the archive's name"
    subprocess.run([*images, "tag", "--force", trainer, mlflow_image()], check=True, capture_output=True)

    out = kind_e2e(kind_cluster, "job")
    assert re.search(r"^breast-cancer\s+4\s+Succeeded\s", out, re.M), out  # mwms list
    assert re.search(r"^breast-cancer\s+Succeeded\s+[0-9a-f]{32}\s", out, re.M), out  # mwms runs
