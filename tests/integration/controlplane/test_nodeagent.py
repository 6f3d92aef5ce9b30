"""The node agent (our kubelet + runtime stand-in) against the real control plane: pods run as local
processes with their own IPs, /etc/hosts DNS, ServiceAccount tokens under RBAC, status, restarts, deletion."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def python_pod(name: str, code: str, *, restart: str = "Never", labels: dict | None = None, **spec) -> dict:
    """A pod running `python -c code` (the venv's python: the node agent puts the venv first on PATH)."""
    container = {
        "name": "main",
        "image": "python:3.11-slim",
        "command": ["python", "-c", textwrap.dedent(code)],
    }
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            **spec,
        },
    }


def as_list(*items: dict) -> dict:
    """Several objects as one manifest (a v1 List) for one `kubectl apply`."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def pod_status(kubectl, namespace: str, name: str) -> dict:
    result = kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return {}
    return json.loads(result.stdout).get("status") or {}


def terminated(kubectl, namespace: str, name: str) -> dict | None:
    """The container's state.terminated once the pod reached a terminal phase."""
    status = pod_status(kubectl, namespace, name)
    if status.get("phase") not in ("Succeeded", "Failed"):
        return None
    return status["containerStatuses"][0]["state"]["terminated"]


SERVER = """
    import socket
    srv = socket.create_server(("0.0.0.0", 2222))
    conn, (peer, _) = srv.accept()
    data = conn.recv(1024).decode()
    conn.sendall(b"hello back")
    conn.close()
    open("/dev/termination-log", "w").write(f"got {data!r} from {peer}")
"""

CLIENT = """
    import socket, time
    deadline = time.monotonic() + 90
    while True:  # the peer's name appears once it has an IP; its port once its process listens
        try:
            conn = socket.create_connection(("w-0.job", 2222), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(b"hello from w-1")
    reply = conn.recv(1024).decode()
    service = sorted({a[4][0] for a in socket.getaddrinfo("job", 2222, socket.AF_INET)})
    me = socket.gethostbyname("w-1.job")
    open("/dev/termination-log", "w").write(f"reply {reply!r}; I am {me}; job is {','.join(service)}")
    raise SystemExit(7)
"""


def test_pods_of_a_headless_service_resolve_each_other_and_talk_over_tcp(kubectl, namespace, wait_for):
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "job"},
        "spec": {"clusterIP": "None", "selector": {"job": "j"}, "ports": [{"port": 2222}]},
    }
    kubectl.apply(
        as_list(
            service,
            python_pod("w-0", SERVER, labels={"job": "j"}, hostname="w-0", subdomain="job"),
            python_pod("w-1", CLIENT, labels={"job": "j"}, hostname="w-1", subdomain="job"),
        ),
        "-n",
        namespace,
    )
    server = wait_for(lambda: terminated(kubectl, namespace, "w-0"), timeout=120, what="w-0 to finish")
    client = wait_for(lambda: terminated(kubectl, namespace, "w-1"), timeout=120, what="w-1 to finish")
    ip0 = pod_status(kubectl, namespace, "w-0")["podIP"]
    ip1 = pod_status(kubectl, namespace, "w-1")["podIP"]
    assert ip0 != ip1
    assert server["exitCode"] == 0 and server["reason"] == "Completed"
    assert server["message"] == f"got 'hello from w-1' from {ip1}"
    assert client["exitCode"] == 7 and client["reason"] == "Error"
    # The Service name maps to both pods, with no DNS server (hosts file) and no kube-proxy.
    assert client["message"] == f"reply 'hello back'; I am {ip1}; job is {','.join(sorted([ip0, ip1]))}"
    assert pod_status(kubectl, namespace, "w-0")["phase"] == "Succeeded"
    assert pod_status(kubectl, namespace, "w-1")["phase"] == "Failed"


LIST_PODS = """
    from kubernetes import client, config
    config.load_incluster_config()
    try:
        pods = client.CoreV1Api().list_namespaced_pod(open(
            "/var/run/secrets/kubernetes.io/serviceaccount/namespace").read())
        message = f"allowed: {len(pods.items)} pods"
    except client.ApiException as exc:
        message = f"denied: {exc.status}"
    open("/dev/termination-log", "w").write(message)
"""


def test_service_account_in_a_pod_is_subject_to_rbac(kubectl, namespace, wait_for):
    kubectl("create", "serviceaccount", "lister", "-n", namespace)
    kubectl.apply(python_pod("before", LIST_PODS, serviceAccountName="lister"), "-n", namespace)
    denied = wait_for(lambda: terminated(kubectl, namespace, "before"), timeout=120, what="pod 'before'")
    assert denied["message"] == "denied: 403"

    kubectl("create", "role", "pod-lister", "--verb=list", "--resource=pods", "-n", namespace)
    kubectl("create", "rolebinding", "lister", "--role=pod-lister", f"--serviceaccount={namespace}:lister",
            "-n", namespace)  # fmt: skip
    kubectl.apply(python_pod("after", LIST_PODS, serviceAccountName="lister"), "-n", namespace)
    allowed = wait_for(lambda: terminated(kubectl, namespace, "after"), timeout=120, what="pod 'after'")
    assert allowed["message"] == "allowed: 2 pods"


def test_deployment_gets_a_replicaset_and_a_running_pod(kubectl, namespace, wait_for):
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "python:3.11-slim",
                            "command": ["python", "-m", "http.server", "8080"],
                        }  # fmt: skip
                    ]
                },
            },
        },
    }
    kubectl.apply(deployment, "-n", namespace)

    def running_pod():
        pods = kubectl.json("get", "pods", "-n", namespace, "-l", "app=web")["items"]
        ready = [
            p
            for p in pods
            if p["status"].get("phase") == "Running"
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]
        return ready[0] if ready else None

    pod = wait_for(running_pod, timeout=120, what="a Running, Ready pod of the Deployment")
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ReplicaSet"
    rs = kubectl.json("get", "replicaset", owner["name"], "-n", namespace)
    assert rs["metadata"]["ownerReferences"][0]["name"] == "web"
    assert pod["status"]["podIP"] and pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]


GRACEFUL = """
    import os, signal, sys, time
    def stop(*_):
        print("got SIGTERM", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("pid", os.getpid(), flush=True)
    while True:
        time.sleep(1)
"""

STUBBORN = """
    import os, signal, time
    signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
    print("pid", os.getpid(), flush=True)
    while True:
        time.sleep(1)
"""


def _pid_from_log(cluster, namespace: str, pod: str) -> int | None:
    try:
        log = cluster.pod_log(namespace, pod, container="main")
    except (FileNotFoundError, OSError):
        return None
    for line in log.splitlines():
        if line.startswith("pid "):
            return int(line.split()[1])
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(cluster, kubectl, namespace, wait_for):
    kubectl.apply(
        as_list(
            python_pod("graceful", GRACEFUL, terminationGracePeriodSeconds=30),
            python_pod("stubborn", STUBBORN, terminationGracePeriodSeconds=2),
        ),
        "-n",
        namespace,
    )
    pids = {
        name: wait_for(
            lambda n=name: _pid_from_log(cluster, namespace, n), timeout=120, what=f"{name} to start"
        )
        for name in ("graceful", "stubborn")
    }
    kubectl("delete", "pod", "graceful", "stubborn", "-n", namespace, "--wait=false")
    for name in pids:
        wait_for(
            lambda n=name: kubectl("get", "pod", n, "-n", namespace, check=False).returncode != 0,
            timeout=60,
            what=f"pod {name} to disappear",
        )
    assert "got SIGTERM" in cluster.pod_log(namespace, "graceful", container="main")
    stubborn_log = cluster.pod_log(namespace, "stubborn", container="main")
    assert "ignoring SIGTERM" in stubborn_log  # it got the SIGTERM first, and only SIGKILL could end it
    assert not any(_alive(pid) for pid in pids.values())


def test_a_deleted_pod_ends_in_a_terminal_phase_before_it_goes(cluster, kubectl, namespace, wait_for):
    """As with the kubelet: a controller holding a finalizer on a pod (Kueue does) sees it Succeeded or Failed
    once its container has stopped, and only then lets it go."""
    hold = {"finalizers": ["mwms.dev/test-hold"]}
    kubectl.apply(
        as_list(
            dict(python_pod("clean", GRACEFUL), metadata={"name": "clean", **hold}),
            dict(
                python_pod("killed", STUBBORN, terminationGracePeriodSeconds=1),
                metadata={"name": "killed", **hold},
            ),
        ),
        "-n",
        namespace,
    )
    for name in ("clean", "killed"):
        wait_for(lambda n=name: _pid_from_log(cluster, namespace, n), timeout=120, what=f"{name} to start")
    kubectl("delete", "pod", "clean", "killed", "-n", namespace, "--wait=false")
    clean = wait_for(lambda: terminated(kubectl, namespace, "clean"), timeout=60, what="clean to end")
    killed = wait_for(lambda: terminated(kubectl, namespace, "killed"), timeout=60, what="killed to end")
    assert pod_status(kubectl, namespace, "clean")["phase"] == "Succeeded" and clean["exitCode"] == 0
    assert pod_status(kubectl, namespace, "killed")["phase"] == "Failed" and killed["exitCode"] == 137
    for name in ("clean", "killed"):
        kubectl(
            "patch", "pod", name, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
        )
        wait_for(
            lambda n=name: kubectl("get", "pod", n, "-n", namespace, check=False).returncode != 0,
            timeout=60,
            what=f"pod {name} to disappear",
        )


FLAKY = """
    import os
    marker = "/scratch/tried"  # an emptyDir outlives container restarts, as in Kubernetes
    if not os.path.exists(marker):
        open(marker, "w").close()
        open("/dev/termination-log", "w").write("first try fails")
        raise SystemExit(3)
    open("/dev/termination-log", "w").write("second try works")
"""


def test_restart_policy_on_failure_restarts_and_counts(kubectl, namespace, wait_for):
    pod = python_pod(
        "flaky",
        FLAKY,
        restart="OnFailure",
        volumes=[{"name": "scratch", "emptyDir": {}}],
        container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
    )
    kubectl.apply(pod, "-n", namespace)
    done = wait_for(lambda: terminated(kubectl, namespace, "flaky"), timeout=120, what="flaky to succeed")
    status = pod_status(kubectl, namespace, "flaky")["containerStatuses"][0]
    assert done["exitCode"] == 0 and done["message"] == "second try works"
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["message"] == "first try fails"


def test_pods_that_cannot_run_here_fail_with_the_reason(kubectl, namespace, wait_for):
    no_command = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "no-command"},
        "spec": {"restartPolicy": "Always", "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    missing_binary = python_pod("missing-binary", "", container={"command": ["no-such-binary", "--flag"]})
    kubectl.apply(as_list(no_command, missing_binary), "-n", namespace)

    state = wait_for(
        lambda: terminated(kubectl, namespace, "no-command"), timeout=60, what="no-command to fail"
    )
    assert state["reason"] == "ImageNotRunnableLocally"
    assert "busybox:1.36" in state["message"]
    assert pod_status(kubectl, namespace, "no-command")["phase"] == "Failed"

    state = wait_for(
        lambda: terminated(kubectl, namespace, "missing-binary"), timeout=60, what="missing-binary"
    )
    assert state["reason"] == "StartError" and state["exitCode"] == 128
    assert "'no-such-binary' not found" in state["message"]


SHARED_WRITER = """
    open("/claim/greeting", "w").write("written by the first pod")
"""
SHARED_READER = """
    open("/dev/termination-log", "w").write(open("/claim/greeting").read())
"""


def test_pods_of_one_claim_share_its_directory(kubectl, namespace, wait_for):
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "shared"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }

    def pod(name, code):
        return python_pod(
            name,
            code,
            volumes=[{"name": "c", "persistentVolumeClaim": {"claimName": "shared"}}],
            container={"volumeMounts": [{"name": "c", "mountPath": "/claim"}]},
        )

    kubectl.apply(as_list(claim, pod("writer", SHARED_WRITER)), "-n", namespace)
    assert (
        wait_for(lambda: terminated(kubectl, namespace, "writer"), timeout=120, what="writer")["exitCode"]
        == 0
    )
    kubectl.apply(pod("reader", SHARED_READER), "-n", namespace)
    state = wait_for(lambda: terminated(kubectl, namespace, "reader"), timeout=120, what="reader")
    assert state["message"] == "written by the first pod"


def test_run_as_user_and_group_own_the_writable_pod_files(cluster, kubectl, namespace, wait_for):
    def pod(name, command):
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsUser": 1000, "runAsGroup": 2000},
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [
                    {"name": "main", "image": "none", "command": command,
                     "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}
                ],
            },
        }  # fmt: skip

    # The venv's python too, even where its interpreter lives under a directory closed to uid 1000 (/root).
    python = [
        "python",
        "-c",
        "import os, kubernetes; open('/dev/termination-log', 'w').write(str(os.getuid()))",
    ]
    kubectl.apply(
        as_list(
            pod("who", ["id"]),
            pod("writer", ["touch", "/scratch/ok", "/dev/termination-log"]),
            pod("py", python),
        ),
        "-n",
        namespace,
    )
    assert wait_for(lambda: terminated(kubectl, namespace, "who"), timeout=120, what="who")["exitCode"] == 0
    assert re.match(r"uid=1000\b.* gid=2000\b", cluster.pod_log(namespace, "who", container="main"))
    assert (
        wait_for(lambda: terminated(kubectl, namespace, "writer"), timeout=120, what="writer")["exitCode"]
        == 0
    )
    state = wait_for(lambda: terminated(kubectl, namespace, "py"), timeout=120, what="py")
    assert (state["exitCode"], state.get("message")) == (0, "1000")


def test_kubectl_logs_reads_the_container_output_through_the_api_server(
    cluster, kubectl, namespace, wait_for
):
    kubectl.apply(python_pod("talker", "for i in range(3): print('line', i)"), "-n", namespace)
    wait_for(lambda: terminated(kubectl, namespace, "talker"), timeout=120, what="talker to finish")
    assert kubectl("logs", "talker", "-n", namespace).stdout == "line 0\nline 1\nline 2\n"
    assert kubectl("logs", "talker", "-n", namespace, "--tail=1").stdout == "line 2\n"
    assert cluster.pod_log(namespace, "talker", container="main") == "line 0\nline 1\nline 2\n"


def _ready(kubectl, namespace: str, name: str) -> bool | None:
    """None until the container runs; then its Ready condition."""
    status = pod_status(kubectl, namespace, name)
    statuses = status.get("containerStatuses") or [{}]
    if status.get("phase") != "Running" or "running" not in statuses[0].get("state", {}):
        return None
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))


def test_probes_decide_readiness_and_restart_a_dead_container(kubectl, namespace, wait_for, tmp_path):
    # The test flips the probes' answers through a hostPath directory the pods serve or read.
    tmp_path.chmod(0o755)
    volume = {"name": "flags", "hostPath": {"path": str(tmp_path)}}
    mount = {"name": "flags", "mountPath": "/flags"}
    web = python_pod(
        "web",
        "",
        restart="Always",
        volumes=[volume],
        container={
            "command": ["python", "-m", "http.server", "8080", "--directory", "/flags"],
            "ports": [{"name": "http", "containerPort": 8080}],
            "volumeMounts": [mount],
            "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1},
        },
    )
    mortal = python_pod(
        "mortal",
        "import time; time.sleep(3600)",
        restart="Always",
        volumes=[volume],
        container={
            "volumeMounts": [mount],
            "livenessProbe": {
                "exec": {"command": ["cat", "/flags/alive"]},
                "periodSeconds": 1,
                "failureThreshold": 1,
            },
        },
    )
    (tmp_path / "alive").write_text("yes")
    kubectl.apply(as_list(web, mortal), "-n", namespace)

    assert wait_for(lambda: _ready(kubectl, namespace, "web") is not None, timeout=120, what="web to run")
    # Running, but /ready answers 404: not Ready, and it stays so until the file appears.
    assert _ready(kubectl, namespace, "web") is False
    (tmp_path / "ready").write_text("ok")
    wait_for(lambda: _ready(kubectl, namespace, "web"), timeout=60, what="web to become Ready")

    wait_for(lambda: _ready(kubectl, namespace, "mortal"), timeout=120, what="mortal to run")
    assert pod_status(kubectl, namespace, "mortal")["containerStatuses"][0]["restartCount"] == 0
    (tmp_path / "alive").unlink()
    wait_for(
        lambda: pod_status(kubectl, namespace, "mortal")["containerStatuses"][0]["restartCount"] >= 1,
        timeout=90,
        what="the liveness probe to restart mortal",
    )


def test_init_containers_run_first_and_their_failure_fails_the_pod(kubectl, namespace, wait_for):
    def pod(name, init_code):
        return python_pod(
            name,
            "open('/dev/termination-log', 'w').write(open('/shared/from-init').read())",
            volumes=[{"name": "shared", "emptyDir": {}}],
            container={"volumeMounts": [{"name": "shared", "mountPath": "/shared"}]},
            initContainers=[
                {
                    "name": "setup",
                    "image": "none",
                    "command": ["python", "-c", init_code],
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                }
            ],
        )

    ok = pod("ok", "open('/shared/from-init', 'w').write('prepared by init')")
    broken = pod("broken", "open('/dev/termination-log', 'w').write('init gave up'); raise SystemExit(4)")
    kubectl.apply(as_list(ok, broken), "-n", namespace)

    state = wait_for(lambda: terminated(kubectl, namespace, "ok"), timeout=120, what="pod ok")
    assert (state["exitCode"], state["message"]) == (0, "prepared by init")
    init = pod_status(kubectl, namespace, "ok")["initContainerStatuses"][0]["state"]["terminated"]
    assert init["exitCode"] == 0

    def failed():
        status = pod_status(kubectl, namespace, "broken")
        return status if status.get("phase") == "Failed" else None

    status = wait_for(failed, timeout=120, what="pod broken to fail")
    init = status["initContainerStatuses"][0]["state"]["terminated"]
    assert (init["exitCode"], init["message"]) == (4, "init gave up")
    assert "running" not in status["containerStatuses"][0]["state"]  # the main container never ran


def test_a_volume_over_tmp_hides_no_other_mount(cluster, kubectl, namespace, wait_for):
    # The chart's hardened pods mount an emptyDir at /tmp; the agent's state dir (every mount source) may live
    # under /tmp too, so mounting /tmp first once hid the ServiceAccount token ("No such file or directory").
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tmp-first"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            "containers": [
                {"name": "main", "image": "none",
                 "command": ["cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace"],
                 "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
            ],
        },
    }  # fmt: skip
    kubectl.apply(pod, "-n", namespace)
    state = wait_for(lambda: terminated(kubectl, namespace, "tmp-first"), timeout=120, what="tmp-first")
    assert state["exitCode"] == 0, state
    assert cluster.pod_log(namespace, "tmp-first", container="main").strip() == namespace


def test_a_volume_over_the_checkout_still_runs_venv_and_sources(cluster, kubectl, namespace, wait_for):
    # The chart's pods mount an emptyDir at /tmp; a checkout under /tmp then lost its venv and its editable
    # sources (the node agent's stand-in for the image).
    top = "/" + Path(sys.prefix).parts[1]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "venv-hidden"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [
                {"name": "main", "image": "none", "command": ["python", "-c", "import mwms_dev.podexec"],
                 "volumeMounts": [{"name": "scratch", "mountPath": top}]}
            ],
        },
    }  # fmt: skip
    kubectl.apply(pod, "-n", namespace)
    state = wait_for(lambda: terminated(kubectl, namespace, "venv-hidden"), timeout=120, what="venv-hidden")
    assert state["exitCode"] == 0, (state, cluster.pod_log(namespace, "venv-hidden", container="main"))
