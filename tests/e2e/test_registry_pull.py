"""The images pulled from a registry, as real clusters get them: `make push-images`
(hack/build/push-images.sh) pushes `make images`' archives to a real OCI registry (Distribution, TLS,
htpasswd: mwms_kit.oci_registry), and a node whose containerd holds none of our images (an empty image store,
nothing loaded but the node's own pause, CoreDNS, busybox and volume provisioner) pulls them: the chart
installed with `global.imageRegistry` and `global.imagePullSecrets` (its operator, and its bundled MLflow from
the trainer image mirrored under MLflow's name), and the trainer image the operator writes into every worker
pod, pulled with the job's own `imagePullSecrets`. containerd trusts the registry's CA through hosts.toml;
credentials travel only in the pods' pull secrets. A digest-pinned install runs exactly what was pushed, and a
wrong secret ends the job `ContainerError` with the pull's error in its message.

Its cluster is its own, for this module only, as README's (tests/e2e/test_readme_commands.py): one real node
per machine, so it never overlaps the node tier's."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms_contract.names import LABEL_JOB_NAME
from mwms_contract.status import TrainJobStatus
from mwms_dev.chain import Chain, check_mlflow
from mwms_dev.devcluster import project_images
from mwms_dev.devmode import tools_bin
from mwms_kit.oci_registry import OciRegistry
from mwms_kit.trainjobs import trainjob

pytestmark = [
    pytest.mark.waits_for_build,  # the registry, crane and cosign (`make oci-tools`, beside the tests)
    pytest.mark.timeout(2400),
]

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()
OPERATOR_NAMESPACE = "mwms-system"
SECRET = "regcred"
# The chart's bundled MLflow image, which global.imageRegistry moves to the registry too.
MLFLOW_PATH = "mlflow/mlflow:v3.17.2"
SMALL_FIT = {"dataset": "synthetic", "syntheticSamples": 512, "seed": 42, "epochs": 2}


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Iterator[OciRegistry]:
    with OciRegistry(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture(scope="module")
def pushed(registry) -> dict[str, str]:
    """`make push-images REGISTRY=<registry>`: {image name: reference by digest}; MLflow's name mirrored."""
    if not project_images():
        pytest.skip("no build/images/*.oci.tar: run `make images` first")
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "build" / "push-images.sh")],
        env={**os.environ, **registry.client_env, "REGISTRY": registry.address},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    refs = {ref.split("@")[0].rsplit("/", 1)[1]: ref for ref in done.stdout.split()}
    assert set(refs) == {"mwms-operator", "mwms-trainer"}, done.stdout
    trainer = f"{registry.address}/mwms-dev/mwms-trainer:{VERSION}"
    registry.crane("copy", trainer, f"{registry.address}/{MLFLOW_PATH}")
    return refs


@pytest.fixture(scope="module")
def pull_cluster(pulling_node_cluster, spare_subnet_index, tmp_path_factory, registry, pushed) -> Iterator:
    state_dir = tmp_path_factory.mktemp("registry-node")
    with pulling_node_cluster("registry", state_dir, spare_subnet_index + 20, registry) as local:
        yield local


@pytest.fixture(scope="module")
def kubectl(pull_cluster, make_kubectl):
    return make_kubectl(pull_cluster.kubeconfig)


def helm_install(kubeconfig: Path, *values: str) -> None:
    """The chart from the checkout, every image from the registry; generous waits: the node pulls ~1 GB."""
    args = [
        str(tools_bin() / "helm"), "upgrade", "--install", "mwms", str(REPO / "charts" / "mwms-operator"),
        "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout", "20m",
        "--set", "operator.replicaCount=1",
        "--set", "mlflow.enabled=true",
        "--set", "mlflow.extraAllowedHosts={10.*}",  # the host reaches MLflow at its pod IP
    ]  # fmt: skip
    for value in values:
        args += ["--set", value]
    done = subprocess.run(
        args, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, capture_output=True, text=True, timeout=1300
    )
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def installed(pull_cluster, kubectl, registry) -> str:
    kubectl("create", "namespace", OPERATOR_NAMESPACE)
    registry.pull_secret(kubectl, OPERATOR_NAMESPACE, SECRET)
    helm_install(
        pull_cluster.kubeconfig,
        f"global.imageRegistry={registry.address}",
        f"global.imagePullSecrets[0].name={SECRET}",
    )
    return OPERATOR_NAMESPACE


def operator_log(kubectl) -> str:
    done = kubectl(
        "logs",
        "-n",
        OPERATOR_NAMESPACE,
        "-l",
        "app.kubernetes.io/component=operator",
        "--tail=100",
        check=False,
    )
    return done.stdout + done.stderr


def pod_images(kubectl, namespace: str, selector: str) -> list[tuple[str, str]]:
    """(the image the pod asks for, the digest of the image the kubelet ran) of each container of the
    selected pods. The status names the image by any of its references (here often MLflow's mirror name for
    the trainer's), so only the digest of its imageID counts."""
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", selector)["items"]
    pairs = []
    for pod in pods:
        asked = {c["name"]: c["image"] for c in pod["spec"]["containers"]}
        pairs += [
            (asked[s["name"]], digest(s["imageID"])) for s in pod["status"].get("containerStatuses", [])
        ]
    return pairs


def job_namespace(kubectl, registry, name: str, password: str | None = None) -> str:
    kubectl("create", "namespace", name)
    registry.pull_secret(kubectl, name, SECRET, password)
    return name


def run_job(chain: Chain, kubectl, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    """A small 2-worker fit whose pods pull with the namespace's pull secret; its TrainJob once it ended."""
    kubectl.apply(
        trainjob(
            name,
            2,
            namespace=namespace,
            trainer=SMALL_FIT,
            mlflow={"experiment": "registry"},
            template={"spec": {"imagePullSecrets": [{"name": SECRET}]}},
            **spec,
        )
    )
    chain.job_namespace = namespace
    try:
        return chain.wait_succeeded(name)
    except Exception:
        print(operator_log(kubectl))
        raise


def chain_for(pull_cluster) -> Chain:
    bins = tools_bin()
    return Chain(
        kubeconfig=pull_cluster.kubeconfig,
        helm=str(bins / "helm"),
        kubectl=str(bins / "kubectl"),
        operator_namespace=OPERATOR_NAMESPACE,
        timeout_s=1500,
    )


def digest(reference: str) -> str:
    return reference.split("@", 1)[1]


def test_the_node_pulls_the_operator_and_the_trainer_with_pull_secrets_and_a_job_succeeds(
    pull_cluster, kubectl, registry, pushed, installed
):
    (operator,) = pod_images(kubectl, OPERATOR_NAMESPACE, "app.kubernetes.io/component=operator")
    assert operator[0] == f"{registry.address}/mwms-dev/mwms-operator:{VERSION}"
    assert operator[1] == digest(pushed["mwms-operator"]), "the operator runs the pushed image"

    chain = chain_for(pull_cluster)
    namespace = job_namespace(kubectl, registry, "pulls")
    job = run_job(chain, kubectl, namespace, "pulled")
    check_mlflow(chain.mlflow_pod_url(), job)  # one run, one model
    workers = pod_images(kubectl, namespace, f"{LABEL_JOB_NAME}={job['metadata']['name']}")
    # The reference the operator wrote (global.imageRegistry moved its default), run as pushed.
    trainer = f"{registry.address}/mwms-dev/mwms-trainer:{VERSION}"
    assert workers and set(workers) == {(trainer, digest(pushed["mwms-trainer"]))}, workers  # those kept
    # Pulled by that name with the job's secret (its layers came with MLflow's mirror of the same image).
    pulled = kubectl.json("get", "events", "-n", namespace, "--field-selector", "reason=Pulled")["items"]
    assert any(e["message"].startswith(f'Successfully pulled image "{trainer}"') for e in pulled), [
        e["message"] for e in pulled
    ]


def test_a_digest_pinned_install_runs_exactly_what_was_pushed(
    pull_cluster, kubectl, registry, pushed, installed
):
    helm_install(
        pull_cluster.kubeconfig,
        f"global.imageRegistry={registry.address}",
        f"global.imagePullSecrets[0].name={SECRET}",
        f"operator.image.digest={digest(pushed['mwms-operator'])}",
        f"trainer.image.digest={digest(pushed['mwms-trainer'])}",
    )
    kubectl(
        "rollout", "status", "-n", OPERATOR_NAMESPACE, "deployment/mwms-mwms-operator", "--timeout=600s",
        timeout=620,
    )  # fmt: skip
    operators = pod_images(kubectl, OPERATOR_NAMESPACE, "app.kubernetes.io/component=operator")
    assert (pushed["mwms-operator"], digest(pushed["mwms-operator"])) in operators, operators

    chain = chain_for(pull_cluster)
    namespace = job_namespace(kubectl, registry, "pinned")
    job = run_job(chain, kubectl, namespace, "pinned")
    check_mlflow(chain.mlflow_pod_url(), job)
    workers = pod_images(kubectl, namespace, f"{LABEL_JOB_NAME}={job['metadata']['name']}")
    # The reference the operator wrote is the digest itself, and the kubelet ran that image.
    assert workers and set(workers) == {(pushed["mwms-trainer"], digest(pushed["mwms-trainer"]))}, workers


def test_a_wrong_pull_secret_ends_the_job_naming_the_pull_error(
    pull_cluster, kubectl, registry, pushed, installed, wait_for
):
    """The trainer image is on the node by now (the tests above pulled it), but the kubelet checks a pod's
    own credentials against the registry before it reuses an image pulled with others' (Kubernetes
    1.35+: KubeletEnsureSecretPulledImages), so the wrong secret still fails the pull."""
    namespace = job_namespace(kubectl, registry, "wrong-secret", password="not-the-password")
    kubectl.apply(
        trainjob(
            "wrong-secret",
            2,
            namespace=namespace,
            trainer=SMALL_FIT,
            template={"spec": {"imagePullSecrets": [{"name": SECRET}]}},
            runPolicy={"containerErrorGraceSeconds": 5},
        )
    )

    def ended() -> TrainJobStatus | None:
        status = TrainJobStatus.of(kubectl.json("get", "trainjobs.mwms.dev", "wrong-secret", "-n", namespace))
        return status if status.phase in ("Failed", "Succeeded") else None

    status = wait_for(ended, timeout=600, interval=2, what="the job with a wrong pull secret to end")
    failed = next(c for c in status.conditions if c.type == "Failed")
    print(f"wrong pull secret: {failed.reason}: {failed.message}")
    assert status.phase == "Failed" and failed.reason == "ContainerError", failed
    # The kubelet posts its "Failed to pull image" event a moment before it sets the container's waiting
    # reason (ErrImagePull): a grace that ends between the two names the pull by its event.
    pull = ("ErrImagePull", "ImagePullBackOff", "Failed to pull image")
    assert any(named in failed.message for named in pull), failed.message
    assert "401" in failed.message or "unauthorized" in failed.message.lower(), failed.message
