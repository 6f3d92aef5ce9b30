"""README's "On a real cluster" section, run as written: every shell command of its install blocks, in order,
against a local control plane of its own with a real kubelet node (containerd, CNI, CoreDNS, a default
StorageClass) that runs the images `make images` built, loaded into the node's containerd as README's
`kind load` loads them into kind. The kustomize path trains the seed sample to `Succeeded` on real trainer
containers with the MLflow of `manifests/mlflow/`; the Helm path installs the chart and waits for its rollout.
A README edit that breaks a command a user copies (a renamed Deployment, a missing manifest) fails here.

Its cluster is its own (the cluster-wide operator these commands install would act on other tests' jobs) and
lives for this module only. The real node is one per machine: this node ends with this module and the node
tier's `real_cluster` with tests/node/, so in any order (`pytest tests` runs tests/e2e/ first) they never
overlap. The node cannot pull: the public MLflow image that manifests/mlflow/ and the chart name is our
trainer image tagged so for this module (it holds the same `mlflow` server; `real_node_chart_values` does so
for the node tier's chart)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mwms_dev.devcluster import project_images
from mwms_dev.devmode import tools_bin

# Loading the trainer image (~1 GB) into containerd comes first, on 2 shared cores: more than the default.
pytestmark = [
    pytest.mark.node,
    pytest.mark.e2e,
    pytest.mark.integration,
    pytest.mark.tf,
    pytest.mark.timeout(1800),
]

REPO = Path(__file__).resolve().parents[2]
SECTION = re.compile(r"^## On a real cluster\n(.*?)^### ", re.S | re.M)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def readme_blocks() -> list[list[str]]:
    """The commands of each ```sh block in the section, comments dropped, in README order."""
    section = SECTION.search((REPO / "README.md").read_text())
    assert section, "README.md has no '## On a real cluster' section"
    blocks = []
    for block in SH_BLOCK.findall(section.group(1)):
        lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
        blocks.append([line for line in lines if line])
    return blocks


def test_the_section_is_the_kustomize_then_the_helm_path():
    """What the test below runs, so a new block in the section is a decision, not a silent addition."""
    (kustomize, helm) = readme_blocks()
    assert kustomize[0] == "kubectl apply -k manifests/" and "kubectl wait" in kustomize[3]
    assert helm[0].startswith("helm install mwms charts/mwms-operator")


def mlflow_image() -> str:
    """The public MLflow image manifests/mlflow/ runs (the chart's default names the same)."""
    deployment = yaml.safe_load((REPO / "manifests" / "mlflow" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


@pytest.fixture(scope="module")
def own_cluster(real_node_cluster, spare_subnet_index: int, tmp_path_factory) -> Iterator:
    if not project_images():
        pytest.skip("no build/images/*.oci.tar: run `make images` first")
    # +20: the real-node subnets, apart from the integration tier's clusters of the same session.
    state_dir = tmp_path_factory.mktemp("readme")
    with real_node_cluster("readme", state_dir, spare_subnet_index + 20) as local:
        node = local.kubelet_nodes["node-1"]
        trainer = next(name for name in node.images() if "/mwms-trainer:" in name)
        node.ctr("images", "tag", "--force", trainer, mlflow_image())
        try:
            yield local
        finally:  # the image store is kept across nodes (~/.cache/mwms/node): leave no stand-in name there
            node.ctr("images", "rm", mlflow_image())


def test_every_command_of_the_real_cluster_section_works(own_cluster):
    env = {
        **os.environ,
        "KUBECONFIG": str(own_cluster.kubeconfig),
        "PATH": f"{tools_bin()}{os.pathsep}{os.environ['PATH']}",
    }

    def sh(command: str, timeout: float = 1200) -> str:
        done = subprocess.run(
            shlex.split(command), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    kustomize, helm = readme_blocks()
    outputs = [sh(command) for command in kustomize]
    listed = outputs[-1]  # kubectl get trainjobs
    assert re.search(r"^breast-cancer\s+4\s+Succeeded\s+0\s+[0-9a-f]{32}\s", listed, re.M), listed

    # The Helm path replaces the kustomize one (the chart would refuse to adopt the objects kubectl made).
    sh("kubectl delete -f manifests/samples/seed-breast-cancer.yaml --wait=true")
    sh("kubectl delete -k manifests/mlflow/ --wait=true")
    sh("kubectl delete -k manifests/ --wait=true")
    for command in helm:
        sh(command)
    assert "deployment/mwms-mwms-operator" in helm[1]
