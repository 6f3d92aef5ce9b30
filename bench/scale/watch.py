"""The scale bench's pod watch: one watch on the operator's pods in every namespace, recording when each pod
was created, bound and Running, when it ended and when its deletion began; from those, duplicate workers and
the most pods of a job alive at once. Which pods and how they group (job, restart, worker index) come from
their labels (Keys: ours by default; training-operator's in bench/scale/peer.py). It measures; it asserts
nothing."""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import kubernetes
import urllib3

from mwms_contract import names

GROUP_KEY = tuple[str, str, str]  # (namespace, job, restart)


@dataclass(frozen=True)
class Keys:
    """Which pods the watch selects and the labels that place each in its job, group and worker index. With no
    `restart` label a pod's group is how many pods of its name (in its namespace) were seen before it: an
    operator that restarts a worker by creating it again under the same name (training-operator)."""

    selector: str
    job: str
    index: str
    restart: str | None


OURS = Keys(
    f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}",
    names.LABEL_JOB_NAME,
    names.LABEL_REPLICA_INDEX,
    names.LABEL_RESTART,
)


@dataclass
class PodRecord:
    namespace: str
    job: str
    restart: str
    index: str
    added: float
    bound: float | None = None
    running: float | None = None
    ended: float | None = None
    deleting: float | None = None  # a deletion was asked for (deletionTimestamp) or the pod is gone
    name: str = ""


class PodWatcher:
    """One watch on the operator's pods in every namespace, on its own thread: when each pod (by uid) was
    first seen, bound to a node and Running, as this process received the events."""

    def __init__(self, core: Any, keys: Keys = OURS) -> None:
        self.core, self.keys = core, keys
        self._named: dict[tuple[str, str], int] = {}  # (namespace, pod name) -> pods seen (Keys.restart None)
        self.pods: dict[str, PodRecord] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PodWatcher:
        """Lists before returning, so no pod the caller creates next can end before the watch sees it."""
        self._version = self._relist(self.keys.selector)
        self._thread.start()
        return self

    def _run(self) -> None:
        selector = self.keys.selector
        version = self._version
        while not self._stop.is_set():
            watch = kubernetes.watch.Watch()
            try:
                for event in watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                ):
                    if event["type"] == "ERROR":  # 410 Gone: the version is too old to watch from
                        version = self._relist(selector)
                        break
                    pod = event["object"]
                    if isinstance(pod, dict):  # undecoded (a BOOKMARK, at times)
                        version = pod["metadata"]["resourceVersion"]
                        continue
                    version = pod.metadata.resource_version
                    if event["type"] != "BOOKMARK":  # a decoded BOOKMARK has metadata only
                        self._seen(pod, time.monotonic(), gone=event["type"] == "DELETED")
                    if self._stop.is_set():
                        break
            except kubernetes.client.ApiException as error:
                if error.status == 410:
                    version = self._relist(selector)
                else:  # e.g. 429 "storage is (re)initializing" from a fresh API server: try again shortly
                    self._stop.wait(1)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                if self._stop.is_set():
                    return  # the cluster is going away
                # A dropped connection: watch again from the last version seen (a dead watch would leave
                # the bench waiting for pods it can no longer see)
                print(f"pod watch: {error!r}; watching again", file=sys.stderr, flush=True)
                self._stop.wait(1)

    def _relist(self, selector: str) -> str:
        """List and record (at the start, and after a 410 Gone, when events were missed: a pod first seen
        then is recorded late); the version to watch from."""
        listed = self.core.list_pod_for_all_namespaces(label_selector=selector)
        for pod in listed.items:
            self._seen(pod, time.monotonic())
        return str(listed.metadata.resource_version)

    def _seen(self, pod: Any, now: float, gone: bool = False) -> None:
        labels = pod.metadata.labels or {}
        with self.lock:
            record = self.pods.get(pod.metadata.uid)
            if record is None:
                record = self.pods[pod.metadata.uid] = PodRecord(
                    pod.metadata.namespace,
                    labels.get(self.keys.job, ""),
                    self._restart(pod, labels),
                    labels.get(self.keys.index, ""),
                    now,
                    name=pod.metadata.name,
                )
            if record.bound is None and pod.spec.node_name:
                record.bound = now
            phase = pod.status.phase if pod.status else None
            if record.running is None and phase in ("Running", "Succeeded", "Failed"):
                record.running = now
            if record.ended is None and phase in ("Succeeded", "Failed"):
                record.ended = now
            if record.deleting is None and (gone or pod.metadata.deletion_timestamp):
                record.deleting = now

    def _restart(self, pod: Any, labels: dict[str, str]) -> str:
        """Its restart label, or how many pods of its name were seen before it (called under the lock)."""
        if self.keys.restart is not None:
            return labels.get(self.keys.restart, "0")
        key = (pod.metadata.namespace, pod.metadata.name)
        self._named[key] = self._named.get(key, 0) + 1
        return str(self._named[key] - 1)

    def stop(self) -> None:
        self._stop.set()

    def groups(self, namespace: str | None = None) -> dict[GROUP_KEY, list[PodRecord]]:
        out: dict[GROUP_KEY, list[PodRecord]] = defaultdict(list)
        with self.lock:
            for record in self.pods.values():
                if namespace is None or record.namespace == namespace:
                    out[(record.namespace, record.job, record.restart)].append(record)
        return out

    def duplicates(self, namespace: str | None = None) -> dict[str, int]:
        """Workers of the same job, group and index alive at the same time (a second created before the first
        was being deleted): `job/restart/index` -> how many overlapped. A worker created again after the
        first was deleted is no duplicate: the operator deletes a batch it could create only in part (a
        refused or failed create) and creates it whole again, before any worker ran its fit."""
        by_worker: dict[str, list[PodRecord]] = defaultdict(list)
        for (_, job, restart), records in self.groups(namespace).items():
            for record in records:
                by_worker[f"{job}/{restart}/{record.index}"].append(record)
        out = {}
        for key, records in by_worker.items():
            records.sort(key=lambda r: r.added)
            overlapping = sum(
                1
                for earlier, later in zip(records, records[1:], strict=False)
                if earlier.deleting is None or later.added < earlier.deleting
            )
            if overlapping:
                out[key] = overlapping + 1
        return out

    def running(self, namespace: str, replicas: int, restart: str = "0") -> dict[str, list[PodRecord]]:
        """job -> its group `restart`'s pods, for the groups whose every worker has been seen Running. A pod
        deleted before it ran is left out: the operator deleted a batch it could create only in part and
        created the group whole again (its replacement is the worker's pod)."""
        out = {}
        for (_, job, group), records in self.groups(namespace).items():
            live = [r for r in records if r.running is not None or r.deleting is None]
            if group == restart and len(live) >= replicas and all(r.running for r in live):
                out[job] = live
        return out

    def most_alive(self, namespace: str) -> dict[str, int]:
        """job -> the most of its pods alive at once (created and not yet being deleted), over all its groups:
        never more than replicas, as a group is created only once the last one's pods are gone."""
        steps: dict[str, list[tuple[float, int]]] = defaultdict(list)
        for (_, job, _), records in self.groups(namespace).items():
            for r in records:
                steps[job] += [(r.added, 1)] + ([(r.deleting, -1)] if r.deleting is not None else [])
        out = {}
        for job, points in steps.items():
            alive = most = 0
            for _, step in sorted(points):  # at one instant, a deletion before a creation
                alive += step
                most = max(most, alive)
            out[job] = most
        return out

    def workers(self, namespace: str | None = None) -> dict[GROUP_KEY, set[str]]:
        """The worker indices each group had (every index once, however often it was created)."""
        return {key: {r.index for r in records} for key, records in self.groups(namespace).items()}
