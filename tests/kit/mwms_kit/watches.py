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
        self.start = lambda: kubectl.stream("get", *args, "--watch", "--output-watch-events", "-o", "json")
        self.process = self.start()
        self.events: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.swap = threading.Lock()  # a restart and stop() never cross
        self.restarts = 0  # watches the server ended, each started again
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while True:
            self.read(self.process)
            # The server may end a watch cleanly (an update of a CRD ends the watches of its objects): start
            # it again. Its first events are then each object's state as it restarts (ADDED).
            with self.swap:
                if self.stopping.is_set() or self.process.wait() != 0:
                    return
                self.restarts += 1
                self.process = self.start()

    def read(self, process: Any) -> None:
        assert process.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in process.stdout:
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
        """Stops the watch; what kubectl said if it had failed before (events may have been missed)."""
        with self.swap:
            self.stopping.set()
            process = self.process
        ended = process.poll()
        process.terminate()
        _, stderr = process.communicate(timeout=30)
        self.thread.join(timeout=30)
        return "" if ended in (None, 0) else f"the watch failed ({ended}): {stderr}"


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
