"""One watch on an operator's pods in every namespace, recording when each pod (by uid) was created, bound,
Running and deleted, as this process received the events; from those: groups that ran, duplicate
workers and the most pods of a job alive at once. Which pods and how they group (job, restart, worker index)
come from their labels (`Keys`). It measures; it asserts nothing."""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import kubernetes
import urllib3

from mwms_contract import names

GroupKey = tuple[str, str, str]  # (namespace, job, restart)


@dataclass(frozen=True)
class Keys:
    """The label selector and the labels naming a pod's job and worker index. With no `restart` label a pod's
    group is how many pods of its name were seen before it (an operator that creates a lost worker again
    under its own name)."""

    selector: str
    job: str
    index: str
    restart: str | None


MANAGED_BY = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
OURS = Keys(MANAGED_BY, names.LABEL_JOB_NAME, names.LABEL_REPLICA_INDEX, names.LABEL_RESTART)


@dataclass
class PodRecord:
    namespace: str
    job: str
    restart: str
    index: str
    added: float
    bound: float | None = None
    running: float | None = None  # Running, or ended without being seen Running
    deleting: float | None = None  # deletionTimestamp set, or gone
    name: str = ""


class PodWatcher:
    def __init__(self, core: Any, keys: Keys = OURS) -> None:
        self.core, self.keys = core, keys
        self.pods: dict[str, PodRecord] = {}
        self.lock = threading.Lock()
        self._named: dict[tuple[str, str], int] = {}  # (namespace, name) -> pods seen, when no restart label
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PodWatcher:
        """Lists before it returns, so no pod created next can end before the watch sees it."""
        self._version = self._relist()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _relist(self) -> str:
        listed = self.core.list_pod_for_all_namespaces(label_selector=self.keys.selector)
        for pod in listed.items:
            self._seen(pod, time.monotonic())
        return str(listed.metadata.resource_version)

    def _run(self) -> None:
        version, pods = self._version, self.core.list_pod_for_all_namespaces
        while not self._stop.is_set():
            settings = {"resource_version": version, "timeout_seconds": 30, "allow_watch_bookmarks": True}
            settings["label_selector"] = self.keys.selector
            try:
                for event in kubernetes.watch.Watch().stream(pods, **settings):
                    pod = event["object"]
                    if event["type"] == "ERROR":  # 410 Gone: too old to watch from
                        version = self._relist()
                        break
                    if isinstance(pod, dict):  # an undecoded BOOKMARK
                        version = pod["metadata"]["resourceVersion"]
                        continue
                    version = pod.metadata.resource_version
                    if event["type"] != "BOOKMARK":
                        self._seen(pod, time.monotonic(), gone=event["type"] == "DELETED")
                    if self._stop.is_set():
                        return
            except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                if self._stop.is_set():  # the cluster is going away
                    return
                # 410 Gone: too old to resume, list again; a dropped connection or a 429 from an API server
                # still starting: watch again from the last version seen, after a second
                print(f"pod watch: {error!r}; watching again", file=sys.stderr, flush=True)
                version = self._relist() if getattr(error, "status", None) == 410 else version
                self._stop.wait(1)

    def _seen(self, pod: Any, now: float, gone: bool = False) -> None:
        meta = pod.metadata
        labels = meta.labels or {}
        with self.lock:
            record = self.pods.get(meta.uid)
            if record is None:
                named = (meta.namespace, meta.name)
                self._named[named] = self._named.get(named, -1) + 1
                restart = labels.get(self.keys.restart, "0") if self.keys.restart else str(self._named[named])
                job, index = labels.get(self.keys.job, ""), labels.get(self.keys.index, "")
                record = self.pods[meta.uid] = PodRecord(
                    meta.namespace, job, restart, index, now, name=meta.name
                )
            phase = pod.status.phase if pod.status else None
            if record.bound is None and pod.spec.node_name:
                record.bound = now
            if record.running is None and phase in ("Running", "Succeeded", "Failed"):
                record.running = now
            if record.deleting is None and (gone or meta.deletion_timestamp):
                record.deleting = now

    def groups(self, namespace: str | None = None) -> dict[GroupKey, list[PodRecord]]:
        out: dict[GroupKey, list[PodRecord]] = defaultdict(list)
        with self.lock:
            for r in self.pods.values():
                if namespace is None or r.namespace == namespace:
                    out[(r.namespace, r.job, r.restart)].append(r)
        return out

    def workers(self, namespace: str | None = None) -> dict[GroupKey, set[str]]:
        """The worker indices each group had (each once, however often it was created)."""
        return {key: {r.index for r in records} for key, records in self.groups(namespace).items()}

    def running(self, namespace: str, replicas: int, restart: str = "0") -> dict[str, list[PodRecord]]:
        """job -> the pods of its group `restart`, for groups whose every worker was seen Running. A pod
        deleted before it ran is left out: the operator deletes a group it could create only in part and
        creates it whole again."""
        out = {}
        for (_, job, group), records in self.groups(namespace).items():
            live = [r for r in records if r.running is not None or r.deleting is None]
            if group == restart and len(live) >= replicas and all(r.running for r in live):
                out[job] = live
        return out

    def duplicates(self, namespace: str | None = None) -> dict[str, int]:
        """`job/restart/index` -> pods of that worker alive at once (a second created before the first was
        being deleted). A worker created again after the first was deleted is no duplicate."""
        by_worker: dict[str, list[PodRecord]] = defaultdict(list)
        for (_, job, restart), records in self.groups(namespace).items():
            for r in records:
                by_worker[f"{job}/{restart}/{r.index}"].append(r)
        overlaps = {}
        for key, records in by_worker.items():
            records.sort(key=lambda r: r.added)
            pairs = zip(records, records[1:], strict=False)
            overlaps[key] = sum(1 for a, b in pairs if a.deleting is None or b.added < a.deleting)
        return {key: n + 1 for key, n in overlaps.items() if n}

    def most_alive(self, namespace: str) -> dict[str, int]:
        """job -> the most of its pods alive at once (created, not yet being deleted), over all its groups."""
        steps: dict[str, list[tuple[float, int]]] = defaultdict(list)
        for (_, job, _), records in self.groups(namespace).items():
            for r in records:
                steps[job] += [(r.added, 1)] + ([(r.deleting, -1)] if r.deleting is not None else [])
        # sorted: at one instant, a deletion before a creation
        return {job: max(accumulate(step for _, step in sorted(points))) for job, points in steps.items()}
