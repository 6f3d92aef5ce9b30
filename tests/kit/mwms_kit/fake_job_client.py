"""The client's side of the API server, in memory: FakeJobClient stands in for mwms.kube.JobClient in one
namespace, for tests of the `mwms` CLI and SDK (tests/integration/client runs the real API server)."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mwms.kube import NotFound, SubmitError

Job = dict[str, Any]
NAMESPACE = "team-a"


class FakeJobClient:
    """Answers from what a test gives it and records every call as (method, argument) in `calls`.

    `jobs`: the TrainJobs listed, watched and got by name; or `job`, the one get_trainjob answers whatever the
    name: a dict, None (NotFound), or a callable asked at each call (a job that changes while it is followed).
    `pods`: name -> pod (as the kubernetes client's to_dict() gives it), or a callable name -> pod or None.
    `events`: the namespace's Events. `changes`: what watch_trainjobs yields, as MODIFIED events.
    `logs`: pod name -> its lines (read_log, stream_log), or a callable name -> lines. A stream gives its
    lines, sets `streamed`, then, unless `log_ends`, stays open until stopped (as a kubelet's may).
    `refuse`: the error create_trainjob raises; deleting fails then too (a submit must say what to delete).
    """

    namespace = NAMESPACE

    def __init__(
        self,
        jobs: list[Job] = (),  # type: ignore[assignment]
        *,
        job: Job | None | Callable[[], Job | None] = None,
        pods: Mapping[str, Job] | Callable[[str], Job | None] = {},  # noqa: B006 (never changed here)
        events: list[Job] = (),  # type: ignore[assignment]
        changes: list[Job] = (),  # type: ignore[assignment]
        logs: Mapping[str, list[str]] | Callable[[str], list[str]] = {},  # noqa: B006
        log_ends: bool = True,
        refuse: BaseException | None = None,
    ) -> None:
        self.jobs, self.job, self.pods = list(jobs), job, pods
        self.events, self.changes, self.logs, self.log_ends = list(events), list(changes), logs, log_ends
        self.refuse = refuse
        self.calls: list[tuple[str, Any]] = []
        self.streamed = threading.Event()

    def named(self, method: str) -> list[Any]:
        return [arg for name, arg in self.calls if name == method]

    def get_trainjob(self, name: str) -> Job:
        self.calls.append(("get_trainjob", name))
        found = self.job() if callable(self.job) else self.job
        if found is None and self.jobs:
            found = next((j for j in self.jobs if j["metadata"]["name"] == name), None)
        if found is None:
            raise NotFound(f"TrainJob {name}: not found in namespace {self.namespace}")
        return found

    def list_trainjobs(self, all_namespaces: bool = False, selector: str | None = None) -> list[Job]:
        self.calls.append(("list_trainjobs", selector))
        return [job for job in self.jobs if selected(job, selector)]

    def watch_trainjobs(
        self,
        all_namespaces: bool = False,
        selector: str | None = None,
        name: str | None = None,
        timeout: Any = None,
    ) -> Iterator[tuple[str, Job]]:
        self.calls.append(("watch_trainjobs", name))
        for job in self.changes:
            if name in (None, job["metadata"]["name"]) and selected(job, selector):
                yield "MODIFIED", job

    def get_pod(self, name: str) -> Job | None:
        self.calls.append(("get_pod", name))
        return self.pods(name) if callable(self.pods) else self.pods.get(name)

    def list_pods(self, selector: str) -> list[Job]:
        self.calls.append(("list_pods", selector))
        assert not callable(self.pods), "list_pods needs `pods` as a dict"
        return list(self.pods.values())

    def list_events(self) -> list[Job]:
        self.calls.append(("list_events", None))
        return self.events

    def lines(self, pod: str) -> list[str]:
        return list(self.logs(pod) if callable(self.logs) else self.logs.get(pod, []))

    def read_log(self, pod: str, tail: int | None = None) -> str:
        self.calls.append(("read_log", pod))
        lines = self.lines(pod)
        return "\n".join(lines if tail is None else lines[-tail:])

    def stream_log(self, pod: str, on_line: Callable[[str], None], stop: threading.Event) -> None:
        self.calls.append(("stream_log", pod))
        for line in self.lines(pod):
            on_line(line)
        self.streamed.set()
        if not self.log_ends:
            stop.wait()

    def create_configmap(self, body: Job) -> Job:
        self.calls.append(("create_configmap", body["metadata"]["name"]))
        return body

    def create_trainjob(self, body: Job) -> Job:
        self.calls.append(("create_trainjob", body["metadata"]["name"]))
        if self.refuse is not None:
            raise self.refuse
        return body

    def delete_configmap(self, name: str) -> None:
        self.calls.append(("delete_configmap", name))
        if self.refuse is not None:
            raise SubmitError(f"the API server refused deleting ConfigMap {name}: forbidden")

    def delete_trainjob(self, name: str, missing_ok: bool = True) -> None:
        self.calls.append(("delete_trainjob", name))
        if self.refuse is not None:
            raise SubmitError(f"the API server refused deleting TrainJob {name}: forbidden")


def selected(job: Job, selector: str | None) -> bool:
    """Whether the job's labels match an equality selector (`a=b,c=d`)."""
    labels = job["metadata"].get("labels") or {}
    pairs = [part.split("=", 1) for part in (selector or "").split(",") if part]
    return all(labels.get(key) == value for key, value in pairs)


def client_on(api: FakeJobClient) -> Any:
    """An mwms.sdk.Client whose API is `api` (no kubeconfig read)."""
    from mwms.sdk import Client

    client = Client.__new__(Client)
    client.api, client.namespace = api, api.namespace  # type: ignore[assignment]
    return client


def run_cli(monkeypatch: Any, api: FakeJobClient, *argv: str) -> tuple[int, str, str]:
    """`mwms ARGV` on `api`: its exit code, stdout and stderr."""
    from mwms import cli

    monkeypatch.setattr(cli, "client_of", lambda args: client_on(api))
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out, err), out.getvalue(), err.getvalue()
