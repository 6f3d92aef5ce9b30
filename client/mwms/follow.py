"""Following a TrainJob: its phase, per-epoch progress (a bar on a terminal, plain lines otherwise) and the
chief's log, until it succeeds or fails (JobSuspended when it is suspended, as `wait` returns on it)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from mwms.jobs import TERMINAL, Job, JobSuspended, job_from, suspended, suspended_message
from mwms.kube import JobClient, NotFound, SubmitError
from mwms_contract.conditions import PENDING, RESTARTING, RUNNING
from mwms_contract.names import CONTAINER_NAME
from mwms_contract.status import FALSE, Progress, TrainJobStatus


def progress_line(progress: Progress | Mapping[str, Any], tty: bool) -> str:
    progress = progress if isinstance(progress, Progress) else Progress.from_dict(progress)
    epoch, epochs = progress.epoch, progress.epochs
    metrics = " ".join(f"{k}={v:.4f}" for k, v in sorted(progress.metrics.items())[:4])
    if tty and epochs:
        done = int(20 * min(epoch or 0, epochs) / epochs)
        return f"epoch {epoch}/{epochs} [{'#' * done}{'.' * (20 - done)}] {metrics}"
    return f"epoch {epoch}{f'/{epochs}' if epochs else ''} {metrics}".rstrip()


def chief_pod(name: str) -> str:
    return f"{name}-worker-0"


class Follower:
    """Phase and per-epoch progress (a bar on a terminal, plain lines otherwise) and the chief's log."""

    def __init__(self, client: JobClient, name: str, out: IO[str], tty: bool, poll: float = 1.0) -> None:
        self.client, self.name, self.out, self.tty, self.poll = client, name, out, tty, poll
        self._bar = ""
        self._lock = threading.Lock()

    def _print(self, line: str) -> None:
        with self._lock:
            if self.tty and self._bar:
                self.out.write("\r\033[K")
            self.out.write(line + "\n")
            if self.tty and self._bar:
                self.out.write(self._bar)
            self.out.flush()

    def _show_progress(self, line: str) -> None:
        if self.tty:
            with self._lock:
                self._bar = line
                self.out.write("\r\033[K" + line)
                self.out.flush()
        else:
            self._print(line)

    def follow(self) -> Job:
        phase, epoch, restarts = None, None, -1
        waiting = ""
        stop = threading.Event()
        streamer: threading.Thread | None = None
        chief = chief_pod(self.name)
        try:
            while True:
                try:
                    job = self.client.get_trainjob(self.name)
                except NotFound:
                    raise SubmitError(f"TrainJob {self.name} was deleted") from None
                status = TrainJobStatus.of(job)
                if status.phase != phase:
                    phase = status.phase
                    if phase:
                        self._print(f"{self.name}: {phase}")
                if pending_reason(status) not in ("", waiting):  # e.g. "Insufficient nvidia.com/gpu"
                    waiting = pending_reason(status)
                    self._print(f"{self.name}: {waiting}")
                if status.restarts != restarts and phase in (RUNNING, RESTARTING, *TERMINAL):
                    # A (re)started group: follow the new chief's log.
                    restarts = status.restarts
                    stop.set()
                    if streamer is not None:
                        streamer.join(timeout=5)
                    stop = threading.Event()
                    streamer = threading.Thread(target=self._stream, args=(chief, stop), daemon=True)
                    streamer.start()
                progress = status.progress
                if progress is not None and progress.epoch is not None and progress.epoch != epoch:
                    epoch = progress.epoch
                    self._show_progress(progress_line(progress, self.tty))
                halted = suspended(job)
                if phase in TERMINAL or halted:
                    if streamer is not None:
                        streamer.join(timeout=10)  # the rest of the chief's log
                    stop.set()
                    if self.tty and self._bar:
                        self.out.write("\n")
                        self._bar = ""
                    if halted:
                        raise JobSuspended(suspended_message(self.name))
                    return job_from(job)
                time.sleep(self.poll)
        finally:
            stop.set()

    def _stream(self, chief: str, stop: threading.Event) -> None:
        """The chief's log, each line prefixed; a log that cannot be read is said, and the job followed on."""
        try:
            self.client.stream_log(chief, lambda line: self._print(f"[worker-0] {line}"), stop)
        except SubmitError as e:
            self._print(f"{self.name}: {e}")


def pending_reason(status: TrainJobStatus) -> str:
    """Why a Pending job's workers do not run yet (its Running condition's message), "" otherwise."""
    if status.phase != PENDING:
        return ""
    running = status.condition(RUNNING)
    return running.message if running is not None and running.status == FALSE else ""


# -- `mwms logs -f`: a worker's (default: the chief's) log, and why it ended ------------------------------

# `logs -f`'s default wait for the chief's container to start (`--pod-running-timeout`, as kubectl's).
POD_RUNNING_TIMEOUT = 300.0


def _started(pod: Mapping[str, Any]) -> bool:
    """The trainer container runs or has run: its log can be read (pod as the client's to_dict())."""
    for status in (pod.get("status") or {}).get("container_statuses") or []:
        state = status.get("state") or {}
        if status.get("name") == CONTAINER_NAME and (state.get("running") or state.get("terminated")):
            return True
    return False


def worker_pod(name: str, index: int) -> str:
    return f"{name}-worker-{index}"


def _who(index: int) -> str:
    return "chief" if index == 0 else f"worker {index}"


def _why_waiting(job: Mapping[str, Any], pod: Mapping[str, Any] | None, index: int = 0) -> str:
    """What `logs -f` waits for, in words: the pod not created yet, or what keeps its container waiting."""
    name = (job.get("metadata") or {}).get("name", "")
    phase = TrainJobStatus.of(job).phase or PENDING
    if pod is None:
        return f"pod {worker_pod(name, index)} to be created (trainjob/{name} is {phase})"
    reasons = []
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reasons.append(f"{condition.get('reason')}: {condition.get('message') or ''}".rstrip(": "))
    for container in (pod.get("status") or {}).get("container_statuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if container.get("name") == CONTAINER_NAME and waiting:
            reasons.append(f"{waiting.get('reason')}: {waiting.get('message') or ''}".rstrip(": "))
    pod_phase = (pod.get("status") or {}).get("phase") or "Pending"
    said = "".join(f"; {r}" for r in reasons)
    return f"the {CONTAINER_NAME} container of pod {worker_pod(name, index)} to start (pod {pod_phase}{said})"


def _ended(
    client: JobClient, name: str, uid: str, restarts: int, index: int = 0, running: bool = False
) -> str | None:
    """Why the worker pod that `logs -f` follows is over: its job was deleted (NotFound) or suspended
    (JobSuspended), the pod is gone or replaced, or (once its log ended, `running` False) its group
    restarted; None while it is still the job's, or still there while its log runs."""
    who = _who(index)
    try:
        job = client.get_trainjob(name)
    except NotFound:
        raise NotFound(f"trainjob/{name} was deleted while its {who}'s log was followed") from None
    status = TrainJobStatus.of(job)
    phase, now, halted = status.phase or PENDING, status.restarts, suspended(job)
    pod = client.get_pod(worker_pod(name, index))
    new_uid = ((pod or {}).get("metadata") or {}).get("uid")
    if new_uid == uid and (running or (now == restarts and not halted)):
        return None  # the same pod: its container's last lines (stopped by a restart or suspend) are to come
    state = "ended" if new_uid == uid else "was replaced" if new_uid else "is gone"
    what = f"pod {worker_pod(name, index)} {state}"
    if halted:
        raise JobSuspended(f"{what}: {suspended_message(name)}")
    if phase in TERMINAL and now == restarts:
        return f"{what}: trainjob/{name} is {phase}"
    group = f"restarted its group (restart {now})" if now != restarts else f"is {phase}"
    again = f"mwms logs -f {name}" + (f" --worker {index}" if index else "")
    return f"{what}: trainjob/{name} {group}; `{again}` follows the new {who}"


def chief_log(
    client: JobClient,
    name: str,
    say: Callable[[str], None],
    wait_timeout: float = POD_RUNNING_TIMEOUT,
    poll: float = 1.0,
    index: int = 0,
    tail: int | None = None,
) -> Iterator[str]:
    """Worker `index`'s (default: the chief's) log lines as it writes them (the last `tail` first, when
    given), until its container ends. Waits at most `wait_timeout` seconds for the container to start
    (TimeoutError), saying what it waits for through `say`; ends with a line through `say` when the pod is
    gone or replaced (a new group starts), and NotFound when the job is deleted."""
    pod_name, who = worker_pod(name, index), _who(index)
    deadline, told = time.monotonic() + wait_timeout, ""
    while True:
        try:
            job = client.get_trainjob(name)
        except NotFound:
            raise NotFound(f"trainjob/{name} was deleted before its {who}'s log began") from None
        pod = client.get_pod(pod_name)
        if pod is not None and _started(pod):
            break
        if suspended(job):
            raise JobSuspended(suspended_message(name))
        phase = TrainJobStatus.of(job).phase
        if pod is None and phase in TERMINAL:
            say(f"trainjob/{name} is {phase} and its {who} pod {pod_name} is gone: no log to follow")
            return
        why = _why_waiting(job, pod, index)
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"the {who} pod {pod_name} did not start within {wait_timeout:g}s: {why} "
                "(--pod-running-timeout waits longer)"
            )
        if why != told:
            say(f"waiting for {why}")
            told = why
        time.sleep(poll)
    uid = (pod.get("metadata") or {}).get("uid") or ""
    restarts = TrainJobStatus.of(job).restarts
    lines: queue.Queue[str | None] = queue.Queue()
    stop = threading.Event()
    failed: list[SubmitError] = []

    def stream() -> None:
        try:
            if tail is None:
                client.stream_log(pod_name, lines.put, stop)
            else:
                client.stream_log(pod_name, lines.put, stop, tail=tail)
        except SubmitError as e:
            failed.append(e)
        finally:
            lines.put(None)

    threading.Thread(target=stream, name=f"log-{pod_name}", daemon=True).start()
    checked = time.monotonic()
    try:
        while True:
            try:
                line = lines.get(timeout=poll)
            except queue.Empty:
                pass  # a quiet log: look at the pod below
            else:
                if line is None:
                    break
                yield line
            if time.monotonic() - checked >= poll:
                checked = time.monotonic()
                ended = _ended(client, name, uid, restarts, index, running=True)
                if ended:
                    say(ended)
                    return
        if failed:
            raise failed[0]
        ended = _ended(client, name, uid, restarts, index)
        if ended:
            say(ended)
    finally:
        stop.set()
