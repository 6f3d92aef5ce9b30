"""Every worker's log in the job's one MLflow run, so it outlives the pod (`mwms logs NAME --group K`):
kept by the supervising parent (pid1.py) and uploaded through the tracking server once the trainer has
exited; never changes the exit code (docs/design/worker-logs-in-mlflow.md).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from mwms_contract import names
from mwms_contract.mlflow_auth import tracking_headers
from mwms_trainer.cluster_spec import from_tf_config

T = TypeVar("T")
RETRY_DELAYS_SECONDS = (1.0, 2.0, 4.0)
UPLOAD_SECONDS = 20.0  # the whole upload, retries included: inside a deleted pod's 30 s grace period
DRAIN_SECONDS = 5.0  # a grandchild the trainer left behind may hold the pipe open: stop reading after this
# A worker stopped by a signal (its pod deleted: a group restart, a suspend) still stops within the 5 s the
# trainer promises (pid1.py): at most 2 s to kill the trainer, these to upload its log.
STOPPED_DRAIN_SECONDS = 0.3
STOPPED_UPLOAD_SECONDS = 2.5
# A worker stopped before its run was found searches for it first: these seconds more (it stops within 10 s).
STOPPED_FIND_SECONDS = 5.0
# While the trainer runs, the job's run is looked up at these pauses (then every RUN_LOOKUP_EVERY_SECONDS)
# until found, so a stopped worker's STOPPED_UPLOAD_SECONDS go to the upload alone.
RUN_LOOKUP_DELAYS_SECONDS = (1.0, 1.0, 2.0, 2.0, 4.0, 8.0, 15.0)
RUN_LOOKUP_EVERY_SECONDS = 30.0
PROXIED = "mlflow-artifacts:"


def cap_of(environ: Mapping[str, str]) -> int:
    text = environ.get(names.ENV_LOG_CAP, "").strip()
    try:
        return max(int(text), 0) if text else names.LOG_CAP_BYTES
    except ValueError:
        return names.LOG_CAP_BYTES


def wanted(environ: Mapping[str, str]) -> bool:
    """A job's worker with a tracking server and a cap above 0 uploads its log."""
    needed = (names.ENV_TRACKING_URI, names.ENV_JOB_UID, names.ENV_TF_CONFIG, names.ENV_EXPERIMENT_NAME)
    return all(environ.get(name, "").strip() for name in needed) and cap_of(environ) > 0


class CappedLog:
    """The first `cap // 8` bytes and the last ones, up to `cap` in all; text() marks what was cut."""

    def __init__(self, cap: int) -> None:
        self.cap, self.head_size = cap, cap // 8
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_size - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        keep = self.cap - self.head_size
        if len(self.tail) > 2 * keep:  # trim now and then, not on every chunk
            del self.tail[: len(self.tail) - keep]

    def text(self) -> str:
        keep = self.cap - self.head_size
        tail = self.tail[-keep:] if keep else b""
        cut = self.total - len(self.head) - len(tail)
        if cut <= 0:
            return (bytes(self.head) + bytes(tail)).decode(errors="replace")
        marker = (
            f"\n{names.LOG_CUT_MARKER} {cut} bytes of this worker's log were cut here: it wrote {self.total} "
            f"bytes, more than the {self.cap}-byte cap ({names.ENV_LOG_CAP})\n"
        )
        return bytes(self.head).decode(errors="replace") + marker + bytes(tail).decode(errors="replace")


class Capture:
    """The pipe between the trainer (child) and its supervisor (parent); open() before the fork."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = dict(environ)
        self.log = CappedLog(cap_of(environ))
        self._read = self._write = -1
        self._reader: threading.Thread | None = None
        self.run: dict[str, Any] | None = None  # the job's run, once found while the trainer runs
        self._ended = threading.Event()

    def open(self) -> None:
        self._read, self._write = os.pipe()

    def in_child(self) -> None:
        """The trainer's stdout and stderr become the pipe (Python's sys.stdout/err write to fd 1 and 2)."""
        os.dup2(self._write, 1)
        os.dup2(self._write, 2)
        os.close(self._read)
        os.close(self._write)

    def in_parent(self) -> None:
        os.close(self._write)
        self._reader = threading.Thread(target=self._copy, name="worker-log", daemon=True)
        self._reader.start()
        threading.Thread(target=self._find_run, name="worker-log-run", daemon=True).start()

    def _find_run(self) -> None:
        """Look for the job's run (the chief opens it as it starts) until found or the trainer has ended."""
        pauses = iter(RUN_LOOKUP_DELAYS_SECONDS)
        while not self._ended.is_set():
            try:
                self.run = find_run(self.environ, delays=(), until=time.monotonic() + UPLOAD_SECONDS)
                return
            except Exception:  # not there yet, or the server is away: the upload will look again
                self._ended.wait(next(pauses, RUN_LOOKUP_EVERY_SECONDS))

    def _copy(self) -> None:
        while chunk := os.read(self._read, 65536):
            self.log.add(chunk)
            view = memoryview(chunk)
            while view:
                try:
                    view = view[os.write(1, view) :]
                except OSError:  # our stdout is gone: keep the copy for MLflow anyway
                    break

    def finish(self, stopped: bool = False) -> None:
        """After the trainer exited: the rest of its output, then the upload (never raises); sooner when it
        was `stopped` by a signal."""
        self._ended.set()
        if self._reader is not None:
            self._reader.join(STOPPED_DRAIN_SECONDS if stopped else DRAIN_SECONDS)
        try:
            budget = UPLOAD_SECONDS
            if stopped:
                budget = STOPPED_UPLOAD_SECONDS + (STOPPED_FIND_SECONDS if self.run is None else 0.0)
            where = upload(self.environ, self.log.text(), budget=budget, run=self.run)
            print(f"mwms: this worker's log is in MLflow at {where}", file=sys.stderr, flush=True)
        except Exception as e:  # a lost log must not change how the worker ended
            print(f"mwms: could not upload this worker's log to MLflow: {e}", file=sys.stderr, flush=True)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an error: the job's credentials go to its own server only


_opener = urllib.request.build_opener(_NoRedirect)


def call(
    environ: Mapping[str, str],
    until: float,
    method: str,
    path: str,
    body: bytes | None = None,
    kind: str = "json",
) -> Any:
    uri = environ[names.ENV_TRACKING_URI].rstrip("/")
    request = urllib.request.Request(uri + path, data=body, method=method)
    for key, value in tracking_headers(environ).items():
        request.add_header(key, value)
    if body is not None:
        request.add_header("Content-Type", "application/json" if kind == "json" else "text/plain")
    with _opener.open(request, timeout=max(until - time.monotonic(), 0.5)) as response:
        data = response.read()
    return json.loads(data) if data else {}


def _transient(error: BaseException) -> bool:
    if isinstance(error, urllib.error.HTTPError):
        return error.code >= 500 or error.code in (408, 409, 429)
    return isinstance(error, OSError)  # unreachable, reset, timed out


def _retry(attempt: Callable[[], T], delays: tuple[float, ...], until: float) -> T:
    for delay in (*delays, None):
        try:
            return attempt()
        except Exception as e:
            if delay is None or not _transient(e) or time.monotonic() + delay >= until:
                raise
            time.sleep(delay)
    raise AssertionError("unreachable")


def find_run(
    environ: Mapping[str, str], delays: tuple[float, ...] = RETRY_DELAYS_SECONDS, until: float | None = None
) -> dict[str, Any]:
    """The job's run (its `info`), which the chief opened: by the job's uid tag, oldest first."""
    until = time.monotonic() + UPLOAD_SECONDS if until is None else until
    query = urllib.parse.urlencode({"experiment_name": environ[names.ENV_EXPERIMENT_NAME]})
    experiment = _retry(
        lambda: call(environ, until, "GET", f"/api/2.0/mlflow/experiments/get-by-name?{query}"),
        delays,
        until,
    )
    search = {
        "experiment_ids": [experiment["experiment"]["experiment_id"]],
        "filter": f"tags.`{names.MLFLOW_TAG_JOB_UID}` = '{environ[names.ENV_JOB_UID]}'",
        "order_by": ["attributes.start_time ASC"],
        "max_results": 1,
    }
    found = _retry(
        lambda: call(environ, until, "POST", "/api/2.0/mlflow/runs/search", json.dumps(search).encode()),
        delays,
        until,
    )
    runs = found.get("runs") or []
    if not runs:
        raise LookupError(f"the job (uid {environ[names.ENV_JOB_UID]}) has no MLflow run yet")
    return dict(runs[0]["info"])


def upload(
    environ: Mapping[str, str],
    text: str,
    delays: tuple[float, ...] = RETRY_DELAYS_SECONDS,
    budget: float | None = None,
    run: dict[str, Any] | None = None,
) -> str:
    """`text` as this worker's log in the job's run (`run`, its `info` when already found), within `budget`
    seconds (UPLOAD_SECONDS); its runs:/ URI."""
    until = time.monotonic() + (UPLOAD_SECONDS if budget is None else budget)
    index = from_tf_config(environ.get(names.ENV_TF_CONFIG)).rank
    path = names.log_artifact_path(int(environ.get(names.ENV_RESTART_COUNT) or 0), index)
    info = run if run is not None else find_run(environ, delays, until)
    root = str(info.get("artifact_uri") or "")
    if not root.startswith(PROXIED):
        raise RuntimeError(
            f"run {info['run_id']} keeps its artifacts at {root}, which the tracking server does not proxy "
            "(mlflow server --serve-artifacts): a worker writes only through the tracking server"
        )
    location = urllib.parse.urlparse(root).path.lstrip("/")
    target = "/api/2.0/mlflow-artifacts/artifacts/" + urllib.parse.quote(f"{location}/{path}")
    _retry(lambda: call(environ, until, "PUT", target, text.encode(), kind="text"), delays, until)
    return f"runs:/{info['run_id']}/{path}"
