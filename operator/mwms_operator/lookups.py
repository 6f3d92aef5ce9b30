"""A starting pod's events, looked up for the start's rules (startup.py: is a peer still pulling its image?
what did the kubelet last say?): spaced out per pod and bounded operator-wide, as each lookup costs the API
server a match against every event in the namespace."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from mwms_contract.conditions import POD_EVENTS_FORBIDDEN
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator import k8s, refusals
from mwms_operator.pods import UNREADABLE, WorkerPod, pod_events
from mwms_operator.startup import events_wanted
from mwms_operator.state import JobKey, State

log = logging.getLogger(__name__)
# A starting pod's events are looked up again only this long after its first lookup, then twice as long after
# each, at most a minute apart, not on every reconcile (each of its peers' pod events queues one): the
# startup clock counts minutes; a pull's end seen late starts it late, never early.
EVENTS_FRESH_SECONDS, EVENTS_STALE_MAX_SECONDS = 5.0, 60.0
# Lookups at once, operator-wide. The API server matches a lookup's field selector against every event in
# the namespace: with 20,000 pods starting, lookups took 14 s each and held the reconcile workers from the
# writes a start needs. A lookup with no free slot, or one that fails, waits for the next reconcile; until
# then its pod counts as "may be pulling its image", which holds the start's clocks (late, never early).
EVENT_LOOKUPS_AT_ONCE = 4


class PodEventLookups:
    def __init__(self, kube: k8s.Kube, state: State, requeue: Callable[[JobKey, float], None]) -> None:
        self.kube, self.state, self.requeue = kube, state, requeue
        self.slots = asyncio.Semaphore(EVENT_LOOKUPS_AT_ONCE)

    async def with_events(
        self,
        key: JobKey,
        spec: TrainJobSpec | SpecError,
        pods: list[WorkerPod],
        previous: Mapping[str, Any],
        now: datetime,
    ) -> list[WorkerPod]:
        """The pods the start's rules ask about, with their events (pulls, last reasons; startup.py) as last
        read. One not yet read is judged as it is (it may be pulling) and the job is looked at again."""
        found: dict[str, WorkerPod] = {}
        forbidden = False  # once refused, the others are not asked: judged without events (UNREADABLE)
        behind = False
        for pod in events_wanted(spec, pods, previous, now):
            due = self.state.events_due(key, pod.uid, EVENTS_FRESH_SECONDS, EVENTS_STALE_MAX_SECONDS)
            try:
                if due and not forbidden and not await self._look_up(key, pod, pods):
                    behind = True
            except refusals.ApiError as error:
                if error.status != 403:
                    raise
                forbidden = True
                await self._say_forbidden(key, error)
            events = UNREADABLE if forbidden else self.state.known_events(key, pod.uid)
            found[pod.uid] = dataclasses.replace(pod, events=events)
        if behind:
            self.requeue(key, EVENTS_FRESH_SECONDS)
        return [found.get(p.uid, p) for p in pods]

    async def _look_up(self, key: JobKey, pod: WorkerPod, pods: list[WorkerPod]) -> bool:
        """Read a pod's events into the state; False if no lookup slot was free or it failed (not a 403,
        which is raised: RBAC the job's status must name)."""
        if self.slots.locked():
            return False
        async with self.slots:
            try:
                listed = await asyncio.to_thread(self.kube.pod_events, key.namespace, pod.name, pod.uid)
            except k8s.TRANSIENT_ERRORS as error:
                if isinstance(error, refusals.ApiError) and error.status == 403:
                    raise
                log.debug("%s/%s: events of %s not read (again later): %s", *key[:2], pod.name, error)
                listed = None
        events = None if listed is None else pod_events(listed)
        self.state.looked_up(key, pod.uid, events, (p.uid for p in pods))
        return events is not None

    async def _say_forbidden(self, key: JobKey, error: refusals.ApiError) -> None:
        """RBAC that lets the operator create pods but not list events must not stop the job: it goes on,
        and is told once, as a Warning event, what the startup timeout cannot see and what to grant."""
        body = self.state.jobs.get(key)
        if body is None or not self.state.events_forbidden(key):
            return
        message = (
            f"the operator may not list events in namespace {key.namespace} ({error.message}): the startup "
            "timeout cannot name why a worker has not joined (an image pull, a failing probe), nor the "
            "container-error grace why one has not started (FailedMount); grant the "
            "operator's ServiceAccount `list` on events there, as the chart and manifests/rbac.yaml do"
        )
        log.warning("%s/%s: %s", key.namespace, key.name, message)
        await asyncio.to_thread(self.kube.post_event, body, "Warning", POD_EVENTS_FORBIDDEN, message)
