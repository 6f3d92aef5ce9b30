"""Following a TrainJob: its phase, per-epoch progress (a bar on a terminal, plain lines otherwise) and the
chief's log, until it succeeds or fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from mwms.jobs import TERMINAL, Job, job_from
from mwms.kube import JobClient, NotFound, SubmitError


def progress_line(progress: Mapping[str, Any], tty: bool) -> str:
    epoch, epochs = progress.get("epoch"), progress.get("epochs")
    metrics = " ".join(f"{k}={v:.4f}" for k, v in sorted((progress.get("metrics") or {}).items())[:4])
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
        stop = threading.Event()
        streamer: threading.Thread | None = None
        chief = chief_pod(self.name)
        try:
            while True:
                try:
                    job = self.client.get_trainjob(self.name)
                except NotFound:
                    raise SubmitError(f"TrainJob {self.name} was deleted") from None
                status = job.get("status") or {}
                if status.get("phase") != phase:
                    phase = status.get("phase")
                    if phase:
                        self._print(f"{self.name}: {phase}")
                if status.get("restarts", 0) != restarts and phase in ("Running", "Restarting", *TERMINAL):
                    # A (re)started group: follow the new chief's log.
                    restarts = status.get("restarts", 0)
                    stop.set()
                    if streamer is not None:
                        streamer.join(timeout=5)
                    stop = threading.Event()
                    streamer = threading.Thread(
                        target=self.client.stream_log,
                        args=(chief, lambda line: self._print(f"[worker-0] {line}"), stop),
                        daemon=True,
                    )
                    streamer.start()
                progress = status.get("progress") or {}
                if progress.get("epoch") is not None and progress.get("epoch") != epoch:
                    epoch = progress["epoch"]
                    self._show_progress(progress_line(progress, self.tty))
                if phase in TERMINAL:
                    if streamer is not None:
                        streamer.join(timeout=10)  # the rest of the chief's log
                    stop.set()
                    if self.tty and self._bar:
                        self.out.write("\n")
                        self._bar = ""
                    return job_from(job)
                time.sleep(self.poll)
        finally:
            stop.set()
