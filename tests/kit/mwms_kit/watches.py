"""`kubectl get --watch` in a thread: every event of what it watches, in order, for tests that must say what
existed over a whole run (not a sample). `kubectl` is the tests' `Kubectl` (tests/conftest.py), or anything
with its `stream(*args)`."""

from __future__ import annotations

import json
import threading
from typing import Any


class Watch:
    """`kubectl get <args> --watch --output-watch-events -o json`: `events` are (type, object), ADDED first
    for what exists when it starts. Subclasses keep their own tally in `seen`."""

    def __init__(self, kubectl: Any, *args: str) -> None:
        self.process = kubectl.stream("get", *args, "--watch", "--output-watch-events", "-o", "json")
        self.events: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        assert self.process.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.process.stdout:
            buffer += line
            try:
                event, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                continue  # the object is not complete yet
            buffer = buffer.lstrip()[end:]
            with self.lock:
                self.events.append((event["type"], event["object"]))
                self.seen(event["type"], event["object"])

    def seen(self, kind: str, obj: dict) -> None:
        """Called for each event, in order, under `lock`."""

    def objects(self) -> list[dict]:
        with self.lock:
            return [obj for _, obj in self.events]

    def stop(self) -> str:
        """Stops the watch; what kubectl said if it had ended before (events may have been missed)."""
        ended = self.process.poll()
        self.process.terminate()
        _, stderr = self.process.communicate(timeout=30)
        self.thread.join(timeout=30)
        return "" if ended is None else f"the watch ended early ({ended}): {stderr}"


class PodWatch(Watch):
    """A job's pods: every pod that exists (in the API, terminating or not) between two events is counted, so
    `most` is the most that ever existed at once, and `uids` every pod there was."""

    def __init__(self, kubectl: Any, namespace: str, job: str) -> None:
        self.live: set[str] = set()
        self.uids: set[str] = set()
        self.names: set[str] = set()
        self.most = 0
        super().__init__(kubectl, "pods", "-n", namespace, "-l", f"mwms.dev/job-name={job}")

    def seen(self, kind: str, obj: dict) -> None:
        uid = obj["metadata"]["uid"]
        if kind == "DELETED":
            self.live.discard(uid)
        else:
            self.live.add(uid)
            self.uids.add(uid)
            self.names.add(obj["metadata"]["name"])
        self.most = max(self.most, len(self.live))

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.events)
