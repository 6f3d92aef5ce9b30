"""README's "On a real cluster" section, run as written: every shell command of its kubectl and Helm blocks,
in order, against a local control plane of its own with a real kubelet node (containerd, CNI, CoreDNS, a
default StorageClass) that runs the images `make images` built, loaded into the node's containerd as the
section's `kind load` loads them into kind (that block is checked for its shape here, and run on kind by
tests/kind/). The kustomize path trains the seed sample to `Succeeded` on real trainer containers with the
MLflow of `manifests/mlflow/` and waits as a user would, for the job's end and then its phase; the Helm path
installs the chart, waits for its rollout and trains the sample again, waited for with `mwms`. A README edit
that breaks a command a user copies (a renamed Deployment, a missing manifest, a jsonpath that the shell would
split) fails here.

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
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mwms_dev.devcluster import project_images
from mwms_dev.devmode import tools_bin

# Loading the trainer image (~1 GB) into containerd comes first, on 2 shared cores: more than the default.
pytestmark = pytest.mark.timeout(1800)

REPO = Path(__file__).resolve().parents[2]
SECTION = re.compile(r"^## On a real cluster\n(.*?)(?=^## |\Z)", re.S | re.M)
SUBSECTION = re.compile(r"^### (.*)\n", re.M)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def commands(block: str) -> list[str]:
    """A block's command lines, comments dropped (none of README's commands holds a '#')."""
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line]


def readme_blocks() -> dict[str, list[list[str]]]:
    """The commands of each ```sh block of the section by subsection ("" before the first), in order."""
    section = SECTION.search((REPO / "README.md").read_text())
    assert section, "README.md has no '## On a real cluster' section"
    parts = SUBSECTION.split(section.group(1))
    titled = {"": parts[0], **dict(zip(parts[1::2], parts[2::2], strict=True))}
    return {title: [commands(block) for block in SH_BLOCK.findall(text)] for title, text in titled.items()}


def test_the_section_is_the_images_then_the_kustomize_then_the_helm_path():
    """What the test below runs, so a new block in the section is a decision, not a silent addition."""
    blocks = readme_blocks()
    assert list(blocks) == ["", "With kubectl (kustomize)", "With Helm"]
    ((images,), (kustomize,), (helm,)) = blocks.values()
    # Not run here (the fixture loads the same archives into the node), but they must say how.
    assert images[0] == "make images" and images[1].startswith("kind create cluster")  # run by tests/kind/
    assert all(c.startswith("kind load image-archive build/images/") for c in images[2:])
    assert kustomize[0] == "kubectl apply -k manifests/"
    # Where Kubeflow Trainer v2 is installed too, a bare `trainjob(s)` may name its TrainJob, not ours.
    jobs = [c for c in kustomize if "trainjob" in c]
    assert jobs and all("trainjobs.mwms.dev" in c for c in jobs), jobs
    # A wait for the job's end (Succeeded or Failed), then a check of the phase that does not wait: a wait for
    # Succeeded alone would sit out its timeout on a failure.
    end, check = (c for c in kustomize if c.startswith("kubectl wait"))
    assert "{.status.completionTime}" in end and "--timeout=0s" in check
    assert shlex.split(end)[2] == "--for=jsonpath={.status.completionTime}", "the quotes keep it one word"
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
        # helm and kubectl pinned, and the mwms client of this venv.
        "PATH": os.pathsep.join([str(tools_bin()), str(Path(sys.executable).parent), os.environ["PATH"]]),
    }

    def sh(command: str, timeout: float = 1200) -> str:
        done = subprocess.run(
            shlex.split(command), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    blocks = readme_blocks()
    (kustomize,), (helm,) = blocks["With kubectl (kustomize)"], blocks["With Helm"]
    outputs = [sh(command) for command in kustomize]
    listed = outputs[-1]  # kubectl get trainjobs.mwms.dev
    assert re.search(r"^breast-cancer\s+4\s+Succeeded\s+0\s+[0-9a-f]{32}\s", listed, re.M), listed

    # The Helm path replaces the kustomize one (the chart would refuse to adopt the objects kubectl made).
    sh("kubectl delete -f manifests/samples/seed-breast-cancer.yaml --wait=true")
    sh("kubectl delete -k manifests/mlflow/ --wait=true")
    sh("kubectl delete -k manifests/ --wait=true")
    for command in helm:
        sh(command)
    assert "deployment/mwms-mwms-operator" in helm[1]
