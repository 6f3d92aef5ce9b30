"""The release, rehearsed (`make release-rehearsal`): the release workflow's own steps, hack/ci/release.sh
(the images `make images` builds, pushed by digest; the chart packaged and pushed with `helm push`; every
artifact signed with cosign and verified by its tag; the wheels and sdists of mwms-contract and mwms uploaded;
the release's files), run against a real OCI registry with authentication (mwms_kit.oci_registry) and a real
package index (pypiserver, mwms_kit.package_index) in place of GHCR and PyPI, with a cosign key made for the
rehearsal in place of the workflow's keyless identity. Then a tampered or unsigned tag is refused, and a user
installs from those artifacts alone: docs/install.md's "Install from a release" commands, as written but for
the registry's address, the mirror values that section names, the seed's script for `train.py` and its epochs,
run on a fresh local cluster whose node holds none of our images and in a fresh venv that installs
`mwms==<version>` from the index (its dependencies from PyPI, through the index's fallback). The journey: the
script submitted and followed to Succeeded, one MLflow run and one model, and `mwms get`, `runs`, `wait` and
`list` saying the same as the TrainJob's status.

Its cluster is its own, for this module only (one real node per machine; see test_readme_commands.py)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from mwms_dev.chain import Chain, check_mlflow
from mwms_dev.devmode import tools_bin
from mwms_kit.oci_registry import OciRegistry, oci_tool, release_tools_python
from mwms_kit.package_index import PackageIndex
from mwms_kit.submit import SEED_SCRIPT

pytestmark = [
    pytest.mark.waits_for_build,  # the registry, crane and cosign (`make oci-tools`, beside the tests)
    pytest.mark.timeout(3600),
]

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()
INSTALL_MD = REPO / "docs" / "install.md"
SECRET = "regcred"
MLFLOW_PATH = "mlflow/mlflow:v3.17.2"  # the chart's bundled MLflow, which the mirror must hold too


def release_commands() -> list[str]:
    """docs/install.md's "Install from a release" commands, in order."""
    section = INSTALL_MD.read_text().split("## Install from a release\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_release_section_installs_the_chart_then_the_client_then_submits():
    """What the rehearsal runs, so a new command in the section is a decision, not a silent addition."""
    commands = release_commands()
    assert commands[0].startswith(
        "helm install mwms oci://ghcr.io/mwms-dev/charts/mwms-operator --version <version>"
    ), commands
    assert commands[2] == "pip install mwms==<version>"
    assert commands[3].startswith("mwms submit train.py") and "--follow" in commands[3]


def cosign(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [oci_tool("cosign"), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    if check and done.returncode != 0:
        raise AssertionError(f"cosign {' '.join(args)} exited {done.returncode}: {done.stderr[-3000:]}")
    return done


def key_pair(directory: Path) -> SimpleNamespace:
    """A cosign key pair made for the rehearsal (cosign.key, encrypted with a password, and cosign.pub)."""
    directory.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    done = subprocess.run(
        [oci_tool("cosign"), "generate-key-pair"],
        cwd=directory,
        env={**os.environ, "COSIGN_PASSWORD": password},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return SimpleNamespace(key=directory / "cosign.key", pub=directory / "cosign.pub", password=password)


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Iterator[OciRegistry]:
    with OciRegistry(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Iterator[PackageIndex]:
    with PackageIndex(tmp_path_factory.mktemp("index")) as server:
        yield server


@pytest.fixture(scope="module")
def release(registry, index, tmp_path_factory) -> SimpleNamespace:
    """hack/ci/release.sh's steps, in the workflow's order, against the local registry and index."""
    work = tmp_path_factory.mktemp("release")
    keys = key_pair(work / "keys")
    bins = tools_bin()
    env = {
        **os.environ,
        **registry.client_env,
        **index.upload_env,
        "REGISTRY": registry.address,
        "REHEARSAL": "1",
        "DIST": str(work / "dist"),
        "PYTHON": release_tools_python(),
        "HELM": str(bins / "helm"),
        "KUBECTL": str(bins / "kubectl"),
        "COSIGN": oci_tool("cosign"),
        "COSIGN_KEY": str(keys.key),
        "COSIGN_PASSWORD": keys.password,
        "COSIGN_PUBLIC_KEY": str(keys.pub),
    }
    steps = ["check", f"v{VERSION}", "images", "chart", "sign", "verify", "python", "upload", "files"]
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "ci" / "release.sh"), *steps],
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    dist = work / "dist"
    images = {ref.split("@")[0].rsplit("/", 1)[1]: ref for ref in (dist / "images.txt").read_text().split()}
    assert set(images) == {"mwms-operator", "mwms-trainer"}
    return SimpleNamespace(
        dist=dist, images=images, chart=(dist / "chart.txt").read_text().strip(), keys=keys
    )


def test_the_release_pushed_and_uploaded_every_artifact(release, registry, index):
    chart = registry.crane("manifest", f"{registry.address}/mwms-dev/charts/mwms-operator:{VERSION}").stdout
    assert json.loads(chart)["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    for name, ref in release.images.items():
        tagged = f"{registry.address}/mwms-dev/{name}:{VERSION}"
        assert registry.crane("digest", tagged).stdout.strip() == ref.split("@")[1]
    uploaded = {path.name for path in (index.root / "packages").iterdir()}
    assert uploaded == {
        f"mwms-{VERSION}-py3-none-any.whl", f"mwms-{VERSION}.tar.gz",
        f"mwms_contract-{VERSION}-py3-none-any.whl", f"mwms_contract-{VERSION}.tar.gz",
    }  # fmt: skip
    for name in ("mwms-operator.yaml", "mlflow.yaml", f"kubectl-mwms-v{VERSION}.tar.gz"):
        assert (release.dist / name).is_file(), name


def test_a_signed_tag_verifies_and_a_tampered_an_unsigned_or_another_keys_is_refused(
    release, registry, tmp_path
):
    env = registry.client_env
    operator = f"{registry.address}/mwms-dev/mwms-operator"
    verify = ("verify", "--key", str(release.keys.pub), "--insecure-ignore-tlog=true")
    cosign(*verify, f"{operator}:{VERSION}", env=env)
    cosign(*verify, f"{registry.address}/mwms-dev/charts/mwms-operator:{VERSION}", env=env)

    # An image no one signed, under a tag of its own.
    registry.crane(
        "mutate", f"{operator}:{VERSION}", "--label", "rehearsal=unsigned", "-t", f"{operator}:unsigned"
    )
    unsigned = cosign(*verify, f"{operator}:unsigned", env=env, check=False)
    assert unsigned.returncode != 0 and "no signatures found" in unsigned.stderr, unsigned.stderr

    # A tag that held the signed image, moved to other content: the signature names the old digest only.
    registry.crane("copy", f"{operator}:{VERSION}", f"{operator}:tampered")
    cosign(*verify, f"{operator}:tampered", env=env)
    registry.crane(
        "mutate", f"{operator}:tampered", "--label", "rehearsal=tampered", "-t", f"{operator}:tampered"
    )
    tampered = cosign(*verify, f"{operator}:tampered", env=env, check=False)
    assert tampered.returncode != 0 and "no signatures found" in tampered.stderr, tampered.stderr

    # The released tag, checked against a key that did not sign it.
    other = key_pair(tmp_path / "other")
    wrong_key = cosign(
        "verify", "--key", str(other.pub), "--insecure-ignore-tlog=true", f"{operator}:{VERSION}",
        env=env, check=False,
    )  # fmt: skip
    assert wrong_key.returncode != 0, wrong_key.stdout


@pytest.fixture(scope="module")
def user_cluster(pulling_node_cluster, spare_subnet_index, tmp_path_factory, registry, release) -> Iterator:
    """A fresh cluster whose node holds none of our images, trusting the registry's CA (hosts.toml)."""
    state_dir = tmp_path_factory.mktemp("release-node")
    trainer = f"{registry.address}/mwms-dev/mwms-trainer:{VERSION}"
    registry.crane(
        "copy", trainer, f"{registry.address}/{MLFLOW_PATH}"
    )  # the mirror holds MLflow's image too
    with pulling_node_cluster("release", state_dir, spare_subnet_index + 20, registry) as local:
        yield local


def test_a_user_installs_the_release_alone_and_submits_a_script(
    user_cluster, make_kubectl, registry, index, release, tmp_path
):
    kubectl = make_kubectl(user_cluster.kubeconfig)
    # The pull secrets a private registry needs, as "Install from a release" says: the operator's namespace
    # and the workers' (their namespace's default ServiceAccount).
    kubectl("create", "namespace", "mwms-system")
    for namespace in ("mwms-system", "default"):
        registry.pull_secret(kubectl, namespace, SECRET)
    kubectl(
        "patch",
        "serviceaccount",
        "default",
        "-n",
        "default",
        "-p",
        json.dumps({"imagePullSecrets": [{"name": SECRET}]}),
    )

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {
        **os.environ,
        **registry.client_env,
        "KUBECONFIG": str(user_cluster.kubeconfig),
        "PATH": f"{venv / 'bin'}{os.pathsep}{tools_bin()}{os.pathsep}{os.environ['PATH']}",
        "PIP_INDEX_URL": index.simple_url,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)

    def sh(argv: list[str], timeout: float = 1800) -> str:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, (
            f"`{shlex.join(argv)}` exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
        return done.stdout

    mirror = [
        "--set", f"global.imageRegistry={registry.address}",
        "--set", f"global.imagePullSecrets[0].name={SECRET}",
        "--set", "mlflow.extraAllowedHosts={10.*}",  # the test reads MLflow at its pod IP
    ]  # fmt: skip
    outputs = []
    for line in release_commands():
        argv = shlex.split(
            line.replace("ghcr.io/mwms-dev", f"{registry.address}/mwms-dev").replace("<version>", VERSION)
        )
        if argv[:2] == ["helm", "install"]:
            argv += mirror
        if argv[:2] == ["mwms", "submit"]:
            argv[argv.index("train.py")] = str(SEED_SCRIPT)
            argv += ["--", "--epochs", "3"]
        outputs.append(sh(argv))
    submitted, listed = outputs[3], outputs[4]

    # The client came from the index, not from this checkout.
    shown = sh(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import mwms, mwms_contract; print(mwms.__file__, mwms_contract.__file__)",
        ]
    )
    assert str(REPO) not in shown and str(venv) in shown, shown

    (job,) = kubectl.json("get", "trainjobs.mwms.dev", "-n", "default")["items"]
    name = job["metadata"]["name"]
    status = job["status"]
    assert status["phase"] == "Succeeded", status
    run_id = status["mlflow"]["runId"]
    chain = Chain(kubeconfig=user_cluster.kubeconfig, kubectl=str(tools_bin() / "kubectl"))
    run = check_mlflow(chain.mlflow_pod_url(), job)  # one run, one model
    assert run["runId"] == run_id and f"MLflow run ID: {run_id}" in submitted, submitted[-3000:]

    # The verbs agree with the status and with each other.
    assert re.search(rf"^{re.escape(name)}\s+Succeeded\s+{run_id}\s", listed, re.M), listed
    got = json.loads(sh(["mwms", "get", name, "-o", "json"]))
    assert got["status"]["phase"] == "Succeeded" and got["status"]["mlflow"]["runId"] == run_id, got
    runs = json.loads(sh(["mwms", "runs", name, "-o", "json"]))
    assert runs["phase"] == "Succeeded" and runs["runId"] == run_id, runs
    assert sh(["mwms", "wait", name]).strip() == f"trainjob/{name} Succeeded"
    assert re.search(rf"^{re.escape(name)}\s.*Succeeded", sh(["mwms", "list"]), re.M)

    # Every one of our images ran as released: pulled from the registry, by the digests the release pushed
    # (a status's own `image` may name another reference of the same image, so the pods' specs say which).
    ran = set()
    for pod in kubectl.json("get", "pods", "-A")["items"]:
        asked = {c["name"]: c["image"] for c in pod["spec"]["containers"]}
        for status in pod["status"].get("containerStatuses", []):
            if asked[status["name"]].startswith(f"{registry.address}/mwms-dev/"):
                ran.add(status["imageID"].split("@")[1])
    assert ran == {ref.split("@")[1] for ref in release.images.values()}, ran
