"""`mwms logs -f`, `mwms wait` and `Client.follow` against the real API server (and the operator, for
phases): each ends, and says what it waited for or why it ended, where before it waited for ever; a log the
API server's RBAC refuses names the right it needs."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from mwms import Client, JobSuspended
from mwms_kit.submit import run_mwms

SUSPENDED = "trainjob/{} is Suspended (resume it: spec.runPolicy.suspend=false)"


@pytest.fixture
def mwms(cluster: Any, namespace: str) -> Callable[..., Any]:
    return lambda *args, timeout=300: run_mwms(cluster.kubeconfig, namespace, *args, timeout=timeout)


def trainjob(name: str, **spec: Any) -> dict[str, Any]:
    """A TrainJob that never starts: its pods, should an operator run (`operator` is module-scoped), fit no
    node."""
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "template": {"spec": {"nodeSelector": {"mwms.dev/no-such": "node"}}}, **spec},
    }


class Following:
    """`mwms logs ARGS` running, its stdout's and stderr's lines gathered as they come."""

    def __init__(self, cluster: Any, namespace: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mwms.cli", "logs", "--namespace", namespace, *args],
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.said: list[str] = []
        self.readers = [
            threading.Thread(target=into.extend, args=(stream,), daemon=True)
            for into, stream in ((self.out, self.process.stdout), (self.said, self.process.stderr))
        ]
        for reader in self.readers:
            reader.start()

    def end(self, timeout: float) -> int | None:
        """Its exit code once it ends by itself within `timeout` seconds (None: killed), all read."""
        try:
            code: int | None = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = None
        for reader in self.readers:
            reader.join(timeout=10)
        return code


def test_logs_follow_of_a_job_whose_chief_never_comes_ends_after_its_bound(crd, kubectl, namespace, mwms):
    kubectl.apply(trainjob("nopods"), "-n", namespace)
    done = mwms("logs", "nopods", "-f", "--pod-running-timeout", "3s")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("mwms logs: waiting for ") and "nopods-worker-0" in lines[0]
    assert "the chief pod nopods-worker-0 did not start within 3s" in lines[-1]


def test_logs_follow_ends_when_the_job_is_deleted_while_it_waits_every_variant_with_exit_1(
    cluster, crd, kubectl, namespace, wait_for
):
    kubectl.apply(trainjob("deleted"), "-n", namespace)
    followers = [Following(cluster, namespace, "deleted", "-f", *more) for more in ((), ("--all",))]
    try:
        for following in followers:
            said = following.said
            wait_for(lambda: said, timeout=60, what="mwms logs -f to say what it waits for")  # noqa: B023
            assert said[0].startswith("mwms logs: ") and "waiting for " in said[0], said
        kubectl("delete", "trainjob", "deleted", "-n", namespace, "--wait=true")
    finally:
        codes = [following.end(timeout=60) for following in followers]
    assert codes == [1, 1], [following.said for following in followers]
    for following in followers:
        assert following.said[-1] == "mwms logs: trainjob/deleted was deleted before its chief's log began\n"


def test_wait_and_logs_follow_return_on_a_suspended_job_with_exit_3_and_wait_takes_a_set_of_phases(
    operator, kubectl, namespace, mwms, make_standin
):
    kubectl.apply(trainjob("held", runPolicy={"suspend": True}), "-n", namespace)
    waited = mwms("wait", "held", "--timeout", "2m")
    assert (waited.returncode, waited.stdout) == (3, "trainjob/held Suspended\n"), waited.stderr
    assert waited.stderr == f"mwms wait: {SUSPENDED.format('held')}\n"
    for variant in ((), ("--all",)):
        followed = mwms("logs", "held", "-f", *variant, timeout=60)
        assert (followed.returncode, followed.stdout) == (3, ""), followed.stderr
        assert followed.stderr == f"mwms logs: {SUSPENDED.format('held')}\n"

    kubectl.apply(make_standin("runs", 1, env={"STANDIN_SLEEP_SECONDS": "3600"}), "-n", namespace)
    running = mwms("wait", "runs", "--for", "Running,Succeeded", "--timeout", "4m")
    assert (running.returncode, running.stdout) == (0, "trainjob/runs Running\n"), running.stderr
    kubectl("delete", "trainjob", "runs", "held", "-n", namespace, "--wait=false")


def test_a_refused_pods_log_names_the_right_and_a_suspend_mid_stream_ends_logs_follow_with_exit_3(
    operator, cluster, kubectl, namespace, mwms, make_standin, account_kubeconfig, wait_for
):
    kubectl.apply(make_standin("long", 1, env={"STANDIN_SLEEP_SECONDS": "3600"}), "-n", namespace)
    running = mwms("wait", "long", "--for", "Running", "--timeout", "4m")
    assert running.returncode == 0, running.stderr

    # A user who may read TrainJobs and pods, but not pods' logs: RBAC itself refuses.
    kubectl("create", "serviceaccount", "no-logs", "-n", namespace)
    kubectl("create", "role", "no-logs", "--verb=get,list,watch", "--resource=trainjobs.mwms.dev,pods",
            "-n", namespace)  # fmt: skip
    kubectl("create", "rolebinding", "no-logs", "--role=no-logs", f"--serviceaccount={namespace}:no-logs",
            "-n", namespace)  # fmt: skip
    refused = run_mwms(account_kubeconfig("no-logs", namespace), namespace, "logs", "long", "-f", timeout=120)
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
    assert f'cannot get resource "pods/log" in API group "" in the namespace "{namespace}"' in refused.stderr
    assert f"(this needs the RBAC right to get pods/log in namespace {namespace}: " in refused.stderr

    following = Following(cluster, namespace, "long", "-f")
    try:
        # The chief's first line: its log is followed.
        wait_for(lambda: following.out, timeout=60, what="the chief's first line")
        assert following.out[0].startswith("standin: "), following.out
        kubectl("patch", "trainjobs.mwms.dev", "long", "-n", namespace, "--type=merge",
                "-p", '{"spec": {"runPolicy": {"suspend": true}}}')  # fmt: skip
    finally:
        code = following.end(timeout=120)
    assert code == 3, following.said
    ended = re.escape(SUSPENDED.format("long"))
    assert re.fullmatch(rf"mwms logs: pod long-worker-0 (ended|is gone): {ended}\n", following.said[-1])

    again = mwms("logs", "long", "-f", timeout=60)
    assert (again.returncode, again.stderr) == (3, f"mwms logs: {SUSPENDED.format('long')}\n")
    with pytest.raises(JobSuspended, match=ended):
        Client(namespace=namespace, kubeconfig=cluster.kubeconfig).follow("long", io.StringIO())
    kubectl("delete", "trainjob", "long", "-n", namespace, "--wait=false")
