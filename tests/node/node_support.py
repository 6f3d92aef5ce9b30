"""What the node tier's tests share: small busybox pods under Pod Security `restricted`, a Service to
them, and commands run in them through the API server and the kubelet; a TrainJob's state, its workers'
containers and logs followed as they run."""

from __future__ import annotations

import json
import threading
import time

from mwms_contract import names

# A pod's and a container's security context that Pod Security `restricted` admits.
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
NO_PRIVILEGES = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def web_pod(
    name: str,
    image: str,
    *,
    labels: dict | None = None,
    hostname: str = "",
    subdomain: str = "",
    page: str = "",
) -> dict:
    """busybox: print a line, serve `page` on :8080 as user 65532; Ready once the port answers."""
    spec: dict = {
        "terminationGracePeriodSeconds": 1,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "web",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    "sh",
                    "-c",
                    f"echo hello-from-{name}; mkdir -p /tmp/www; echo '{page}' > /tmp/www/index.html; "
                    "exec httpd -f -p 8080 -h /tmp/www",
                ],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if hostname:
        spec.update(hostname=hostname, subdomain=subdomain)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": spec,
    }


def web_service(name: str, app: str) -> dict:
    """A ClusterIP Service: port 80 to the web_pod's 8080 of the pods labelled app=`app`."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": app}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def wait_ready(kubectl, namespace: str, *names: str) -> None:
    for name in names:
        kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", namespace, "--timeout=60s", timeout=90)


def exec_sh(kubectl, namespace: str, pod: str, script: str, check: bool = True):
    return kubectl("exec", "-n", namespace, pod, "--", "sh", "-c", script, check=check, timeout=60)


def http_get(kubectl, namespace: str, pod: str, host: str, port: int) -> str:
    """The body of GET / (busybox nc: Debian's static busybox wget crashes in its glibc lookups)."""
    script = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {host} {port}"
    response = exec_sh(kubectl, namespace, pod, script).stdout.replace("\r\n", "\n")
    return response.split("\n\n", 1)[-1]


def status_of(job: dict) -> dict:
    return job.get("status") or {}


def phase_is(phase: str):
    return lambda job: status_of(job).get("phase") == phase


def wait_for_job(kubectl, namespace: str, name: str, predicate, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = kubectl.json("get", "trainjob", name, "-n", namespace)
        if predicate(job):
            return job
        if status_of(job).get("phase") == "Failed" or time.monotonic() > deadline:
            raise AssertionError(f"trainjob/{name}: {what} not reached: {status_of(job)}")
        time.sleep(1)


def running_container(kubectl, namespace: str, pod: str, restart: int, timeout: float) -> str:
    """The containerd container id of the pod of the group's `restart`-th (re)start, once its container
    runs; a pod of that name from an earlier start, being deleted, is waited out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
        if found.returncode == 0:
            body = json.loads(found.stdout)
            (status,) = body["status"].get("containerStatuses") or [{}]
            ours = body["metadata"]["labels"].get(names.LABEL_RESTART) == str(restart)
            if ours and "running" in status.get("state", {}) and status.get("containerID"):
                return status["containerID"].removeprefix("containerd://")
        time.sleep(0.5)
    raise AssertionError(f"pod/{pod}: no running container of restart {restart} after {timeout}s")


def follow_log(kubectl, namespace: str, pod: str, predicate, timeout: float, what: str) -> str:
    """The pod's log as it was the moment `predicate` held, read line by line from `kubectl logs --follow`:
    a kill that follows lands within a line of it, not a poll's interval and a process start later."""
    deadline = time.monotonic() + timeout
    log = ""
    while time.monotonic() < deadline:
        follower = kubectl.stream("logs", "--follow", pod, "-n", namespace)
        stop = threading.Timer(max(0.0, deadline - time.monotonic()), follower.kill)
        stop.start()
        try:
            log = ""
            for line in follower.stdout:
                log += line
                if predicate(log):
                    return log
        finally:
            stop.cancel()
            follower.kill()
            follower.wait()
        time.sleep(0.5)  # the stream ended (the container is not up yet, or went): follow it again
    raise AssertionError(f"pod/{pod}: {what} not logged after {timeout}s:\n{log[-2000:]}")
