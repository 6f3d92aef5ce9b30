"""`from mwms import Client`: TrainJobs from Python, the same verbs as the `mwms` command.

client = Client(namespace="team-a")
job = client.submit("train.py", replicas=4, args=["--epochs", "20"])   # or a function: submit(train)
job = client.wait(job.name, timeout=3600)
job.phase, job.mlflow.run_id, job.mlflow.model_uri, job.progress
"""

from __future__ import annotations

import builtins
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import mwms.submit as packing
from mwms.describe import (
    Description,
    Event,
    describe_job,
    describe_run,
    job_events_or_kept,
    known_servers,
    with_peaks,
)
from mwms.follow import POD_RUNNING_TIMEOUT, Follower, chief_pod
from mwms.jobs import Job, NoResult, Run, chief_summary, chiefs_value, job_from
from mwms.kube import Cluster, JobClient, SubmitError
from mwms.logs import job_logs, job_tracking_uri
from mwms.placement import Placement
from mwms.tracking_server import TrackingServer
from mwms.ui import RunPage, run_page
from mwms_contract.conditions import FAILED, PHASES, SUCCEEDED, SUSPENDED

# What `wait` returns on whatever it waits for: a job that ended, or one that waits for someone to resume it.
WAIT_PHASES = (SUCCEEDED, FAILED, SUSPENDED)


def _on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def placement_of(
    *, template: Mapping[str, Any] | str | os.PathLike[str] | None = None, **asked: Any
) -> Placement:
    """Client.submit's placement keywords as a Placement: a template path is read, tolerations may be
    kubectl's KEY[=VALUE]:EFFECT, a deadline "2h"; a misspelt keyword is a TypeError, as Python's own."""
    import mwms.placement as rules

    known = set(Placement.__dataclass_fields__)
    unknown = sorted(set(asked) - known)
    if unknown:
        raise TypeError(f"Client.submit() got an unexpected keyword argument {unknown[0]!r}")
    try:
        if isinstance(template, str | os.PathLike):
            template = rules.read_template(Path(template))
        if asked.get("deadline") is not None:
            asked["deadline"] = rules.duration(asked["deadline"])
        asked["tolerations"] = [
            rules.toleration(t) if isinstance(t, str) else dict(t) for t in asked.get("tolerations") or ()
        ]
    except ValueError as e:
        raise SubmitError(str(e)) from None
    asked = {k: v for k, v in asked.items() if v is not None}
    return Placement(template=dict(template or {}), **asked)


class Client:
    """TrainJobs in one namespace (default: the kubeconfig context's) of one cluster."""

    def __init__(
        self,
        namespace: str | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        image: str | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        self.cluster = cluster or Cluster(
            namespace=namespace,
            kubeconfig=None if kubeconfig is None else os.fspath(Path(kubeconfig).expanduser()),
            context=context,
            image=image,
        )
        self.api = JobClient(self.cluster)
        self.namespace = self.api.namespace

    def submit(
        self,
        target: Callable[..., Any] | str | os.PathLike[str],
        *,
        replicas: int = 1,
        args: Sequence[str] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        experiment: str | None = None,
        image: str | None = None,
        working_dir: str | os.PathLike[str] | None = None,
        requirements: str | os.PathLike[str] | None = None,
        use_custom_strategy: bool = False,
        dry_run: bool = False,
        **placement: Any,
    ) -> Job:
        """A script (with `args`, from `working_dir` and a pip `requirements` file) or a function (called with
        `kwargs`; inside a MultiWorkerMirroredStrategy scope unless use_custom_strategy) as a TrainJob of
        `replicas` workers. SubmitError (nothing left behind) when the code or the API server refuses.

        What it asks of the cluster, per worker (mwms.placement.Placement): cpu="4", memory="16Gi", gpu=1
        (gpu_resource="nvidia.com/gpu"; NVIDIA GPUs without an `image` run the trainer's CUDA image), env={},
        labels={}, queue= (Kueue's LocalQueue), node_selector={}, tolerations=[{"key": ..., "effect": ...}]
        (or "KEY[=VALUE]:EFFECT" strings), deadline= (seconds or "2h"), backoff_limit=, template= (a
        PodTemplateSpec dict, or a path to its YAML). dry_run: the TrainJob it would create (`.raw`), created
        nowhere."""
        if replicas < 1:
            raise SubmitError(f"replicas must be at least 1, got {replicas}")
        asked = placement_of(**placement)
        if callable(target):
            code = packing.pack_function(target, kwargs or {}, use_custom_strategy)
            default_name = str(getattr(target, "__name__", "train")).replace("_", "-")
        else:
            code = packing.pack(
                Path(target),
                None if working_dir is None else Path(working_dir),
                None if requirements is None else Path(requirements),
            )
            default_name = Path(target).name
        name = name or packing.job_name(default_name)
        job: dict[str, Any] = {
            "replicas": replicas,
            "args": args,
            "experiment": experiment,
            "image": asked.image(image or self.cluster.image),
            "placement": asked,
        }
        if dry_run:
            body = packing.trainjob(name, code, **job)
            return job_from({**body, "metadata": {**body["metadata"], "namespace": self.namespace}})
        return job_from(packing.submit(self.api, name, code, **job))

    def get(self, name: str) -> Job:
        """The job now (NotFound when there is none)."""
        return job_from(self.api.get_trainjob(name))

    def list(self, all_namespaces: bool = False, selector: str | None = None) -> list[Job]:
        """The jobs, those whose labels match `selector` (kubectl's: "team=a,tier!=dev") when given."""
        return [job_from(obj) for obj in self.api.list_trainjobs(all_namespaces, selector)]

    def watch(
        self,
        names: Sequence[str] = (),
        all_namespaces: bool = False,
        selector: str | None = None,
        timeout: int | None = None,
    ) -> Iterator[Job]:
        """Each job as it changes from now on (those `names`, or whose labels match `selector`), as
        `kubectl get -w`; until `timeout` seconds have passed (None: until the caller stops)."""
        if len(names) > 1:  # one watch by name each would need threads; the namespace's, filtered, does not
            wanted = set(names)
            events = self.api.watch_trainjobs(all_namespaces, selector, timeout=timeout)
            yield from (job_from(obj) for _, obj in events if obj["metadata"]["name"] in wanted)
            return
        name = names[0] if names else None
        events = self.api.watch_trainjobs(all_namespaces, selector, name, timeout)
        yield from (job_from(obj) for _, obj in events)

    def delete(self, name: str) -> Job:
        """Deletes the job (its pods and code ConfigMap follow); the job as it was (NotFound if none)."""
        job = self.get(name)
        self.api.delete_trainjob(name, missing_ok=False)
        return job

    def wait(
        self,
        name: str,
        timeout: float | None = None,
        poll: float = 1.0,
        phases: Collection[str] | None = None,
    ) -> Job:
        """The job once its phase is one of `phases` (default: Succeeded, Failed or Suspended), as Kubeflow's
        wait_for_job_status. It also returns on a phase that cannot turn into one of them (Succeeded or
        Failed), and on Suspended (no phase follows until someone resumes it): see `.phase`. TimeoutError
        after `timeout` seconds (saying why the operator leaves the job alone, if it does); ValueError for a
        phase that does not exist."""
        wanted = set(WAIT_PHASES if phases is None else phases)
        unknown = wanted - set(PHASES)
        if unknown or not wanted:
            raise ValueError(f"no such phase: {', '.join(sorted(unknown))} (phases: {', '.join(PHASES)})")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(name)
            if job.phase in wanted or job.phase in WAIT_PHASES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                why = f": {job.held}" if job.held else ""
                raise TimeoutError(
                    f"TrainJob {self.namespace}/{name} is still {job.phase} after {timeout:g}s{why}"
                )
            time.sleep(poll)

    def logs(
        self,
        name: str,
        follow: bool = False,
        pod_running_timeout: float = POD_RUNNING_TIMEOUT,
        say: Callable[[str], None] | None = None,
        *,
        worker: int = 0,
        all_workers: bool = False,
        group: int | None = None,
        previous: bool = False,
        tail: int | None = None,
        tracking_uri: str | None = None,
    ) -> Iterator[str]:
        """Worker `worker`'s (default: the chief's) log lines, or every worker's (`all_workers`, each line
        prefixed `[worker-I] `), of the current group, of group `group` (0: the first start) or of the one
        before (`previous`); the last `tail` lines only, when given. From the pod while it is that group's,
        else from the job's MLflow run, where every worker leaves its log when it exits (mwms.logs.NoLog
        when neither has it). With `follow`, the running group's log as it is written, until the container
        ends: it waits at most `pod_running_timeout` seconds for the container to start (TimeoutError) and
        says what it waits for, and why the log ended (a new group started), through `say` (default: a line
        on stderr); NotFound when the job is deleted, JobSuspended when it is suspended, LogRefused without
        the right to read pods' logs. With `all_workers`, the others' lines still come when one worker's log
        fails (said through `say`), then NoLog. The run is read on `tracking_uri`, else on the job's tracking
        server as this machine reaches it (through the API server's service proxy where it is a Service)."""
        yield from job_logs(
            self.api,
            name,
            worker=worker,
            all_workers=all_workers,
            group=group,
            previous=previous,
            tail=tail,
            follow=follow,
            say=say or _on_stderr,
            pod_running_timeout=pod_running_timeout,
            tracking_uri=tracking_uri,
        )

    def tracking_server(self, job: Job, tracking_uri: str | None = None) -> TrackingServer | None:
        """The job's tracking server as this machine reaches it (`tracking_uri` over the one it names)."""
        uri = tracking_uri or job_tracking_uri(self.api, job, os.environ)
        return None if uri is None else TrackingServer(uri, self.api)

    def events(self, name: str, tracking_uri: str | None = None) -> builtins.list[Event]:
        """The Events of the job and of its pods, oldest first (as Kubeflow's get_job_events); once the API
        server has forgotten them (after an hour), those the post-mortems in the job's run kept."""
        job = self.get(name)
        return job_events_or_kept(self.api, job, self.tracking_server(job, tracking_uri))

    def describe(self, name: str, tracking_uri: str | None = None) -> Description:
        """The job, its conditions, each worker's pod state and last reason, its recent Events and run; a
        worker whose pod is gone, and Events the API server forgot, as its run's post-mortems keep them."""
        job = self.get(name)
        server = self.tracking_server(job, tracking_uri)
        return with_peaks(describe_job(self.api, job, server), server)

    def describe_run(self, run_id: str, tracking_uri: str | None = None) -> Description:
        """A job known by its MLflow run alone (the TrainJob may be deleted), from the post-mortems the run
        keeps: on `tracking_uri`, else MLFLOW_TRACKING_URI, the servers this namespace's jobs name and the
        chart's bundled MLflow, the first that has the run."""
        uris = [tracking_uri] if tracking_uri else known_servers(self.api, os.environ)
        return describe_run(run_id, [TrackingServer(uri, self.api) for uri in uris])

    def ui(
        self, name: str, port: int = 0, address: str = "127.0.0.1", tracking_uri: str | None = None
    ) -> RunPage:
        """The job's run in the MLflow UI: `.url`; served on `address`:`port` (0: a free one) through the API
        server's service proxy when this machine does not reach the tracking server, until `.close()`."""
        job = self.get(name)
        server = self.tracking_server(job, tracking_uri)
        if server is None or not job.mlflow.run_id:
            missing = "no MLflow run yet" if server else "no tracking server named (pass tracking_uri)"
            raise SubmitError(f"trainjob/{name} has {missing}")
        return run_page(server, job.mlflow.experiment_id, job.mlflow.run_id, address, port)

    def runs(self, name: str) -> Run:
        """The job's MLflow run and model."""
        return self.get(name).mlflow

    def follow(self, name: str, out: IO[str] | None = None) -> Job:
        """Prints the job's phases, progress and the chief's log to `out` (stderr) until it succeeds or fails,
        and returns it; JobSuspended when it is suspended (as `wait` returns on it), SubmitError when it is
        deleted. A chief's log that cannot be read (no right to pods/log) is a line, and the job followed."""
        stream = out or sys.stderr
        return Follower(self.api, name, stream, tty=stream.isatty()).follow()

    def chief_summary(self, name: str) -> dict[str, Any]:
        """What the chief's termination message says ({} while it runs, or once its pod is gone): runId,
        modelUri, and its return value (`result`) or where in MLflow it is (`resultArtifact`)."""
        return chief_summary(self.api.get_pod(chief_pod(name)))

    def result(self, name: str) -> Any:
        """The chief's return value of a succeeded job, whole, read from MLflow when it was too big for the
        termination message (at this machine's MLFLOW_TRACKING_URI, else the job's tracking server as this
        machine reaches it); NoResult otherwise."""
        job = self.get(name)
        if not job.succeeded:
            raise NoResult(f"TrainJob {self.namespace}/{name} is {job.phase}: {job.message}".rstrip(": "))
        pod = self.api.get_pod(chief_pod(name))
        if pod is None:
            raise NoResult(f"the chief pod of {name} is gone (spec.cleanPodPolicy): its result went with it")
        return chiefs_value(chief_summary(pod), self.tracking_server(job))
