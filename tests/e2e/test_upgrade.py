"""An upgrade mid-job, as docs/install.md's "Upgrading" says, on a real node.

The previous version (hack/build/build-previous.sh: the newest release tag, or a pinned commit until the
first tag) is installed from its own chart with its own images, built by its own image script; a 2-worker
job starts under its operator; then the section's commands, run as written (the checkout's chart stands in
for the release's OCI chart), upgrade the release to this checkout's chart and images while the job runs.
The workers are the stand-in (mwms_kit/standin_worker.py) writing a real MLflow run to the chart's bundled
server; they end only when the test lets them (STANDIN_WAIT_FILE), once the old operator pods are gone, so
the upgrade lands mid-job without a guessed time, and the job's end is the new operator's to write.

Checked, from watches that run from before the job until its end (not samples):
- the job: Succeeded with exactly one MLflow run; two pods in all (none recreated, never more at once), its
  Service kept; `status.restarts` 0 in every status it ever had; the status the old operator wrote
  (`startTime`, `restarts`, `mlflow.runId`) is the new one's, continued (`modelUri` of the same run).
- one operator at a time: the rollout does run old and new operator pods side by side (both Ready at once),
  and the Lease keeps one leader: every change of holder goes through a release (no two holders back to
  back), no old holder after a new one, a new pod holds it at the end; each holder's log says it led, each
  old holder's that it released the Lease, none that it lost it.
- the CRD: before, the server's schema is the previous version's, after, this checkout's (manifests/crd.yaml);
  every spec field this checkout added is refused as an unknown field before the upgrade and known after.

Its cluster is its own, for this module only (as README's test: the old release's cluster-wide operator and
CRD must not meet the node tier's chart). The MLflow server runs from this checkout's trainer image in both
releases (the public MLflow image cannot be pulled here), so the upgrade does not restart it."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from mwms_dev.builds import built
from mwms_dev.chain import Chain, mlflow_get, mlflow_post
from mwms_dev.devcluster import project_images
from mwms_dev.devmode import tools_bin
from mwms_kit.install_doc import upgrade_commands
from mwms_kit.standin import standin_container
from mwms_kit.trainjobs import trainjob
from mwms_kit.watches import PodWatch, Watch

# The previous version's images are built (once per commit) and the trainer image loaded first.
pytestmark = pytest.mark.timeout(2400)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "mwms-operator"
RELEASE_CHART = "oci://ghcr.io/mwms-dev/charts/mwms-operator --version <new>"  # what the doc upgrades to
RELEASE, NAMESPACE = "mwms", "mwms-system"  # as docs/install.md names them
DEPLOYMENT = f"{RELEASE}-mwms-operator"
LEASE = f"{DEPLOYMENT}-leader"
GATE = "/tmp/upgrade-done"  # the stand-in workers end once this file exists in their pod
REPLICAS = 2


@pytest.fixture(scope="module")
def previous() -> SimpleNamespace:
    """The previous version's cache directory (hack/build/build-previous.sh): its tree, images and tag."""
    if not project_images():  # the images the upgrade goes to
        pytest.skip("no build/images/*.oci.tar: run `make images` first")
    where = built("build-previous.sh", env={"PYTHON": str(REPO / ".venv" / "bin" / "python")})
    return SimpleNamespace(
        ref=(where / "ref").read_text().strip(),
        tag=(where / "image-tag").read_text().strip(),
        chart=where / "tree" / "charts" / "mwms-operator",
        crd=yaml.safe_load((where / "tree" / "manifests" / "crd.yaml").read_text()),
        images=sorted((where / "images").glob("*.oci.tar")),
    )


@pytest.fixture(scope="module")
def own_cluster(real_node_cluster, spare_subnet_index: int, previous, tmp_path_factory) -> Iterator:
    # +20: the real-node subnets; README's module (the same offset) has ended before this one starts.
    state_dir = tmp_path_factory.mktemp("upgrade")
    with real_node_cluster("upgrade", state_dir, spare_subnet_index + 20) as local:
        local.kubelet_nodes["node-1"].load_images(previous.images)
        yield local


@pytest.fixture(scope="module")
def kubectl(own_cluster, make_kubectl):
    return make_kubectl(own_cluster.kubeconfig)


class LogFollow:
    """`kubectl logs -f --timestamps` of one pod in a thread, kept after the pod is gone."""

    def __init__(self, kubectl: Any, pod: str) -> None:
        self.pod, self.lines = pod, []
        self.process = kubectl.stream("logs", "-f", "--timestamps", "-n", NAMESPACE, pod)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.thread.join(timeout=30)


# -- the CRD ------------------------------------------------------------------------------------------------
def schemas(crd: dict) -> dict[str, Any]:
    """Each served version's openAPIV3Schema."""
    return {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v.get("served")}


def spec_fields(crd: dict) -> dict[str, dict]:
    """Every field under `spec` of the storage version's schema (objects, not arrays): path -> its schema."""
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    found: dict[str, dict] = {}

    def walk(schema: dict, path: str) -> None:
        for name, field in (schema.get("properties") or {}).items():
            found[f"{path}.{name}"] = field
            walk(field, f"{path}.{name}")

    walk(version["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec")
    return found


def example(field: dict) -> Any:
    """A value the field's schema accepts, as far as its type says (CEL rules are not read)."""
    if "default" in field:
        return field["default"]
    if field.get("enum"):
        return field["enum"][0]
    kind = field.get("type")
    return {"boolean": True, "integer": field.get("minimum", 1), "number": field.get("minimum", 1)}.get(
        kind, {"object": {}, "array": []}.get(kind, "x")
    )


def added_fields(old: dict, new: dict) -> dict[str, Any]:
    """The spec fields `new` has and `old` lacks, leaves only: path -> a value for it."""
    before, after = spec_fields(old), spec_fields(new)
    added = {path: field for path, field in after.items() if path not in before}
    return {
        path: example(field)
        for path, field in added.items()
        if not any(p.startswith(path + ".") for p in added)
    }


def first_unknown(path: str, old: dict) -> str:
    """The part of `path` the old schema does not know: what its API server names as the unknown field."""
    known, parts = spec_fields(old), path.split(".")
    return next(".".join(parts[:i]) for i in range(2, len(parts) + 1) if ".".join(parts[:i]) not in known)


def probe(kubectl, namespace: str, path: str, value: Any) -> subprocess.CompletedProcess[str]:
    """A server-side dry run of a TrainJob setting `path`, unknown fields refused (`--validate=strict`)."""
    job = trainjob("schema-probe", 1, namespace=namespace)
    node = job
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return kubectl(
        "create", "--dry-run=server", "--validate=strict", "-f", "-", input=json.dumps(job), check=False
    )


def served_crd(kubectl) -> dict:
    return kubectl.json("get", "crd", "trainjobs.mwms.dev")


# -- the operators -----------------------------------------------------------------------------------------
def ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def image_of(pod: dict) -> str:
    (container,) = pod["spec"]["containers"]
    return str(container["image"])


def side_by_side(events: list[tuple[str, dict]], old_image: str) -> bool:
    """Whether an old and a new operator pod were both Ready at some moment of the watch."""
    live: dict[str, dict] = {}
    for kind, pod in events:
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            live.pop(name, None)
        else:
            live[name] = pod
        versions = {image_of(p) == old_image for p in live.values() if ready(p)}
        if versions == {True, False}:
            return True
    return False


def holders(lease_events: list[tuple[str, dict]]) -> list[str]:
    """The Lease's holders in order, '' where it was released, each run of one holder once."""
    seen: list[str] = []
    for _, lease in lease_events:
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        if not seen or seen[-1] != holder:
            seen.append(holder)
    return seen


def pod_of(identity: str) -> str:
    return identity.rsplit("_", 1)[0]  # the identity is `<pod>_<pid>`


def lease_holder(kubectl) -> str:
    return kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}").stdout


def operator_logs(kubectl) -> str:
    done = kubectl(
        "logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator", "--tail=100", check=False
    )
    return done.stdout + done.stderr


def experiment_runs(url: str, experiment: str) -> list[dict]:
    found = mlflow_get(url, "experiments/get-by-name", {"experiment_name": experiment})["experiment"]
    return mlflow_post(url, "runs/search", {"experiment_ids": [found["experiment_id"]]}).get("runs", [])


# -- the test ----------------------------------------------------------------------------------------------
def test_helm_upgrade_mid_job_continues_the_job_with_one_leader_and_the_new_crd(
    own_cluster, kubectl, previous, tmp_path, wait_for
):
    node = own_cluster.kubelet_nodes["node-1"]
    version = (REPO / "VERSION").read_text().strip()
    old_operator = f"ghcr.io/mwms-dev/mwms-operator:{previous.tag}"
    old_trainer = f"ghcr.io/mwms-dev/mwms-trainer:{previous.tag}"
    new_trainer = f"ghcr.io/mwms-dev/mwms-trainer:{version}"
    loaded = node.images()
    assert {old_operator, old_trainer, new_trainer} <= set(loaded), loaded
    env = {
        **os.environ,
        "KUBECONFIG": str(own_cluster.kubeconfig),
        "PATH": f"{tools_bin()}{os.pathsep}{os.environ['PATH']}",
    }

    def sh(command: str, timeout: float = 600) -> str:
        done = subprocess.run(
            shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    # The user's values file, for both versions: the bundled MLflow (our trainer image), progress every 2 s.
    values = {
        "mlflow": {
            "enabled": True,
            "extraAllowedHosts": ["10.*"],  # the host reaches MLflow at its pod IP
            "image": dict(zip(("repository", "tag"), new_trainer.rsplit(":", 1), strict=True)),
        },
        "operator": {"progressIntervalSeconds": 2},
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    kubectl("create", "namespace", NAMESPACE)
    kubectl.restrict(NAMESPACE)
    # The previous version as it was installed: its chart, its images (their tag is the build's own name).
    sh(
        f"helm install {RELEASE} {previous.chart} -n {NAMESPACE} -f values.yaml --wait --timeout 10m "
        f"--set operator.image.tag={previous.tag} --set trainer.image.tag={previous.tag}",
        timeout=660,
    )
    wait_for(lambda: lease_holder(kubectl), timeout=120, what="an old operator to lead")
    selector = "app.kubernetes.io/component=operator"
    old_pods = [
        p["metadata"]["name"] for p in kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
    ]
    # Every watch and log follow stops at the end, whatever happened; `early` says which ended on its own.
    stack, early = contextlib.ExitStack(), []

    def watch(*args: str) -> Watch:
        made = Watch(kubectl, *args)
        stack.callback(lambda: early.append(made.stop()))
        return made

    operator_pods = watch("pods", "-n", NAMESPACE, "-l", selector)
    lease = watch("leases", "-n", NAMESPACE, "--field-selector", f"metadata.name={LEASE}")
    logs = {pod: LogFollow(kubectl, pod) for pod in old_pods}
    for follow in logs.values():
        stack.callback(follow.stop)

    # The CRD is the previous version's; each spec field this checkout added is unknown to it.
    new_crd = yaml.safe_load((REPO / "manifests" / "crd.yaml").read_text())
    added = added_fields(previous.crd, new_crd)
    print(f"spec fields added since {previous.ref}: {sorted(added) or 'none'}")
    assert schemas(served_crd(kubectl)) == schemas(previous.crd)
    with stack, kubectl.fresh_namespace("upgrade") as namespace:
        kubectl.restrict(namespace)
        for path, value in added.items():
            refused = probe(kubectl, namespace, path, value)
            unknown = f'unknown field "{first_unknown(path, previous.crd)}"'
            assert refused.returncode != 0 and unknown in refused.stderr, (path, refused.stderr)

        name, experiment = "upgrade", f"upgrade-{namespace}"
        job = trainjob(
            name,
            REPLICAS,
            container=standin_container(old_trainer),
            env={"STANDIN_MLFLOW": "first", "STANDIN_EPOCH_SECONDS": "0", "STANDIN_WAIT_FILE": GATE},
            trainer={"epochs": 2},
            mlflow={"experiment": experiment},
        )
        pods = PodWatch(kubectl, namespace, name)
        stack.callback(lambda: early.append(pods.stop()))
        statuses = watch("trainjobs.mwms.dev", "-n", namespace, "--field-selector", f"metadata.name={name}")
        try:
            kubectl.apply(job, "-n", namespace)

            def status() -> dict:
                return kubectl.json("get", "trainjob", name, "-n", namespace).get("status") or {}

            def running_with_progress() -> dict | None:
                now = status()
                progress = (now.get("progress") or {}).get("epoch") or 0
                opened = (now.get("mlflow") or {}).get("runId")
                return now if now.get("phase") == "Running" and progress >= 1 and opened else None

            before = wait_for(
                running_with_progress, timeout=300, interval=1, what="Running, its run and progress"
            )
            service = kubectl.json("get", "service", name, "-n", namespace)["metadata"]["uid"]

            # The upgrade, as docs/install.md says, to this checkout's chart (and so its images).
            commands = upgrade_commands()
            assert RELEASE_CHART in commands[0], commands[0]
            outputs = [sh(command.replace(RELEASE_CHART, str(CHART))) for command in commands]
            assert name in outputs[-1], outputs[-1]  # kubectl get trainjobs.mwms.dev -A

            def only_new_operators() -> str | None:
                listed = kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
                if any(image_of(p) == old_operator for p in listed) or len(listed) != 2:
                    return None
                holder = lease_holder(kubectl)
                return holder if pod_of(holder) in {p["metadata"]["name"] for p in listed} else None

            leader = wait_for(
                only_new_operators, timeout=300, interval=1, what="the old pods gone, a new leader"
            )
            assert status().get("phase") == "Running", status()  # the workers wait for the gate

            # The CRD is this checkout's: what it added is known now.
            assert schemas(served_crd(kubectl)) == schemas(new_crd)
            for path, value in added.items():
                known = probe(kubectl, namespace, path, value)
                assert "unknown field" not in known.stderr, (path, known.stderr)
                print(f"{path}={value!r}: {'accepted' if known.returncode == 0 else known.stderr.strip()}")

            for worker in sorted(pods.names):
                kubectl("exec", "-n", namespace, worker, "--", "touch", GATE)

            def ended() -> str | None:
                phase = status().get("phase")
                return phase if phase in ("Succeeded", "Failed") else None

            assert wait_for(ended, timeout=300, interval=1, what="the job to end") == "Succeeded", status()
            after = status()
        except BaseException:
            print(operator_logs(kubectl), json.dumps(status(), indent=1))
            raise
        stack.close()
        assert not any(early), early

        # The job: two pods, never recreated, its Service kept, no restart counted in any status it had.
        assert pods.names == {f"{name}-worker-{i}" for i in range(REPLICAS)}, pods.names
        assert len(pods.uids) == REPLICAS and pods.most <= REPLICAS, (pods.uids, pods.most)
        assert kubectl.json("get", "service", name, "-n", namespace)["metadata"]["uid"] == service
        counted = {(obj.get("status") or {}).get("restarts", 0) for obj in statuses.objects()}
        assert counted == {0}, f"restarts over the run: {counted}"
        # The old operator's status, continued by the new one.
        assert after["startTime"] == before["startTime"]
        assert after.get("restarts", 0) == before.get("restarts", 0) == 0
        assert after["mlflow"]["runId"] == before["mlflow"]["runId"]
        assert after["mlflow"]["modelUri"] == f"runs:/{before['mlflow']['runId']}/model"
        url = Chain(
            own_cluster.kubeconfig, kubectl=str(tools_bin() / "kubectl"), operator_namespace=NAMESPACE
        )
        runs = experiment_runs(url.mlflow_pod_url(), experiment)
        assert [r["info"]["run_id"] for r in runs] == [before["mlflow"]["runId"]], runs
        assert runs[0]["info"]["status"] == "FINISHED"

    # One operator at a time: old and new pods did run side by side, and the Lease kept one leader.
    assert side_by_side(operator_pods.events, old_operator), "no moment with an old and a new pod both Ready"
    image = {p["metadata"]["name"]: image_of(p) for p in operator_pods.objects()}
    history = holders(lease.events)
    print(f"Lease holders: {history}")
    led = [h for h in history if h]
    released = all(a == "" or b == "" for a, b in zip(history, history[1:], strict=False))
    assert released, f"a holder not released: {history}"
    olds = [image[pod_of(h)] == old_operator for h in led]
    assert olds[0] and not olds[-1] and olds == sorted(olds, reverse=True), f"old after new: {history}"
    assert led[-1] == leader
    for identity, old in zip(led, olds, strict=True):  # the old pods are gone: their logs were followed
        pod = pod_of(identity)
        text = logs[pod].text() if old else kubectl("logs", "-n", NAMESPACE, pod, "--timestamps").stdout
        assert f"leader election: {identity} leads" in text, f"{identity}:\n{text[-3000:]}"
        if old:
            assert "leader election: released the Lease" in text, f"{identity}:\n{text[-3000:]}"
    for pod, follow in logs.items():
        assert "exiting so that a standby takes over" not in follow.text(), f"{pod} lost the Lease"
