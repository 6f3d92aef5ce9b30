"""README's "On a real cluster" section, run as written: every shell command of its install blocks, in order,
against a local control plane of its own (so the cluster-wide operator these commands install touches no
other test's jobs). The kustomize path trains the seed sample to `Succeeded` on real trainer workers with the
MLflow of `manifests/mlflow/`; the Helm path installs the chart and waits for its rollout. A README edit that
breaks a command a user copies (a renamed Deployment, a missing manifest) fails here. The images block
(`make images`, `kind load`) is not run: `make test` builds the images itself, and kind cannot run here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.tf]

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


@pytest.fixture(scope="module")
def own_cluster(local_cluster, spare_subnet_index, tmp_path_factory) -> Iterator:
    with local_cluster("readme", tmp_path_factory.mktemp("readme"), spare_subnet_index) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tools_bin() -> Path:
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "tools.sh")], capture_output=True, text=True, timeout=600, check=True
    )
    return Path(done.stdout.strip().splitlines()[-1])


def test_every_command_of_the_real_cluster_section_works(own_cluster, tools_bin: Path):
    env = {
        **os.environ,
        "KUBECONFIG": str(own_cluster.kubeconfig),
        "PATH": f"{tools_bin}{os.pathsep}{os.environ['PATH']}",
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
