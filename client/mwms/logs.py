"""`mwms logs`: a worker's log from its pod while the pod lives, from the job's MLflow run after.

Each worker uploads its log when it exits (mwms_trainer.worker_log) to logs/group-<restart>/worker-<i>.log of
the job's run, so a restarted group's logs and a cleaned-up job's logs stay readable. The pod is read when it
is the asked group's (its mwms.dev/restart label), else the run, on the job's tracking server as this machine
reaches it (tracking_server.py: through the API server's service proxy where it is a Service of the cluster).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mwms.follow import POD_RUNNING_TIMEOUT, chief_log, worker_pod
from mwms.jobs import TERMINAL, Job, JobSuspended, chief_tracking_uri, job_from
from mwms.kube import JobClient, LogRefused, NotFound, SubmitError
from mwms.tracking_server import TrackingServer
from mwms_contract import names


class NoLog(SubmitError):
    """The log asked for is neither in a pod nor in the job's MLflow run (the message says why)."""


# What ends every worker's log at once (said once, not once a worker): the job deleted or suspended, the
# right to read pods' logs missing.
JOB_WIDE = (NotFound, JobSuspended, LogRefused)


def unread(failed: list[int]) -> NoLog:
    """`--all`'s end when some worker's log could not be read (each said why as it failed): exit 1, as for
    that worker's log alone."""
    which = ", ".join(map(str, failed))
    logs = f"the log of worker {which}" if len(failed) == 1 else f"the logs of workers {which}"
    return NoLog(f"{logs} could not be read (said above)")


def group_of(job: Job, group: int | None, previous: bool) -> int:
    """The (re)start of the group asked for: `group`, the one before the current (`previous`), or the
    current one."""
    if previous:
        if job.restarts == 0:
            raise NoLog(f"trainjob/{job.name} has not restarted its group: there is no previous group")
        return job.restarts - 1
    if group is None:
        return job.restarts
    if not 0 <= group <= job.restarts:
        raise NoLog(f"trainjob/{job.name} has groups 0 to {job.restarts}, not {group}")
    return group


def job_tracking_uri(api: JobClient | None, job: Job, environ: Mapping[str, str]) -> str | None:
    """This machine's MLFLOW_TRACKING_URI, else the server the job's status (status.mlflow.trackingUri),
    spec or chief pod names."""
    spec_mlflow = (job.raw.get("spec") or {}).get("mlflow") or {}
    uri = environ.get(names.ENV_TRACKING_URI) or job.mlflow.tracking_uri or spec_mlflow.get("trackingUri")
    if not uri and api is not None:
        uri = next(
            filter(None, map(chief_tracking_uri, api.list_pods(f"{names.LABEL_JOB_NAME}={job.name}"))), None
        )
    return str(uri) if uri else None


def tracking_server(
    api: JobClient, job: Job, environ: Mapping[str, str], explicit: str | None = None
) -> TrackingServer:
    """The job's tracking server: `explicit` (--tracking-uri), else job_tracking_uri's."""
    uri = explicit or job_tracking_uri(api, job, environ)
    if not uri:
        raise NoLog(
            f"trainjob/{job.name}'s pods are gone and neither it nor its status names a tracking server: "
            "set MLFLOW_TRACKING_URI (or pass --tracking-uri) to the server its workers left their logs in"
        )
    return TrackingServer(uri, api, environ)


def tail_of(lines: list[str], tail: int | None) -> list[str]:
    """The last `tail` lines (all of them when None, as kubectl's --tail=-1)."""
    if tail is None or tail < 0:
        return lines
    return lines[len(lines) - tail :] if tail else []


def stored_log(
    api: JobClient,
    job: Job,
    index: int,
    group: int,
    tail: int | None,
    environ: Mapping[str, str],
    explicit: str | None = None,
) -> list[str]:
    """Worker `index`'s log of `group` from the job's run (on `explicit`, else the job's tracking server)."""
    path = names.log_artifact_path(group, index)
    if not job.mlflow.run_id:
        raise NoLog(f"no log of worker {index} in group {group}: trainjob/{job.name} has no MLflow run")
    server = tracking_server(api, job, environ, explicit)
    try:
        text = server.artifact(job.mlflow.run_id, path)
    except SubmitError as e:
        raise NoLog(f"cannot read {path} of run {job.mlflow.run_id}: {e}") from None
    if text is None:
        raise NoLog(
            f"no log of worker {index} in group {group}: its pod is gone and run {job.mlflow.run_id} has no "
            f"{path} (a worker uploads its log when it exits; one killed outright (SIGKILL, a lost node) "
            "cannot)"
        )
    return tail_of(text.splitlines(), tail)


def _pod_group(pod: Mapping[str, Any] | None) -> int | None:
    labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(names.LABEL_RESTART)
    return None if value is None else int(value)


def worker_lines(
    api: JobClient,
    job: Job,
    index: int,
    group: int,
    tail: int | None = None,
    follow: bool = False,
    say: Callable[[str], None] = lambda _: None,
    pod_running_timeout: float = POD_RUNNING_TIMEOUT,
    environ: Mapping[str, str] = os.environ,
    explicit: str | None = None,
) -> Iterator[str]:
    """One worker's log lines: the pod's while it is the group's (followed until its container ends, with
    `follow`), else the copy in the job's run (a finished group's log does not grow: `follow` reads it);
    `explicit`: the tracking server to read it from (--tracking-uri)."""
    if follow and group == job.restarts and not job.done:
        yield from chief_log(api, job.name, say, pod_running_timeout, index=index, tail=tail)
        return
    pod = api.get_pod(worker_pod(job.name, index))
    if pod is not None and _pod_group(pod) == group:
        try:
            yield from api.read_log(worker_pod(job.name, index), tail).splitlines()
            return
        except SubmitError:
            if group == job.restarts and not job.done:
                raise  # its container has not started: the API server's message says so
    yield from stored_log(api, job, index, group, tail, environ, explicit)


def all_lines(
    sources: Mapping[int, Callable[[Callable[[str], None]], Iterator[str]]], say: Callable[[str], None]
) -> Iterator[str]:
    """Every worker's lines, each prefixed `[worker-I] `, as they come (one thread a worker). A worker whose
    log cannot be read is a line through `say`, not the end of the others; once all have ended, the first
    (by worker) of what ends them all (JOB_WIDE) is raised, else `unread` when a worker's log failed."""
    lines: queue.Queue[str | None] = queue.Queue()
    errors: dict[int, BaseException] = {}

    def run(index: int, source: Callable[[Callable[[str], None]], Iterator[str]]) -> None:
        prefix = f"[worker-{index}] "
        try:
            for line in source(lambda text: say(prefix + text)):
                lines.put(prefix + line)
        except JOB_WIDE as e:
            errors[index] = e
        except (SubmitError, TimeoutError) as e:
            errors[index] = e
            say(f"{prefix}{e}")
        finally:
            lines.put(None)

    for index, source in sources.items():
        threading.Thread(target=run, args=(index, source), name=f"log-{index}", daemon=True).start()
    running = len(sources)
    while running:
        line = lines.get()
        if line is None:
            running -= 1
        else:
            yield line
    wide = [errors[index] for index in sorted(errors) if isinstance(errors[index], JOB_WIDE)]
    if wide:
        raise wide[0]
    if errors:
        raise unread(sorted(errors))


def job_logs(
    api: JobClient,
    name: str,
    *,
    worker: int = 0,
    all_workers: bool = False,
    group: int | None = None,
    previous: bool = False,
    tail: int | None = None,
    follow: bool = False,
    say: Callable[[str], None] = lambda _: None,
    pod_running_timeout: float = POD_RUNNING_TIMEOUT,
    tracking_uri: str | None = None,
) -> Iterator[str]:
    job = job_from(api.get_trainjob(name))
    chosen = group_of(job, group, previous)
    if not 0 <= worker < max(job.replicas, 1):
        raise NoLog(f"trainjob/{name} has workers 0 to {job.replicas - 1}, not {worker}")

    def source(index: int) -> Callable[[Callable[[str], None]], Iterator[str]]:
        return lambda tell: worker_lines(
            api, job, index, chosen, tail, follow, tell, pod_running_timeout, os.environ, tracking_uri
        )

    if not all_workers:
        yield from source(worker)(say)
        return
    if not follow or chosen != job.restarts or job.phase in TERMINAL:
        failed = []
        for index in range(job.replicas):  # stored or finished logs: one worker after the other
            try:
                yield from (f"[worker-{index}] {line}" for line in source(index)(say))
            except NoLog as e:
                say(f"[worker-{index}] {e}")
                failed.append(index)
        if failed:
            raise unread(failed)
        return
    yield from all_lines({index: source(index) for index in range(job.replicas)}, say)
