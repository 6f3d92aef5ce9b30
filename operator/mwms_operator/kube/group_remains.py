"""What is left of a group of workers as it ends, read for its post-mortem: its pods, whole, as the group
ends (before a restart or a clean-up deletes them), and later, off the reconcile, the events of the job and
of those pods (they outlive the pods). What cannot be read is said in a note, never raised: a post-mortem
with less in it must not stop the reconcile that ended the group."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from mwms_contract import names, postmortem
from mwms_contract.status import format_time
from mwms_operator.kube import refusals
from mwms_operator.kube.client import Kube
from mwms_operator.observe.state import JobKey

# All of a group's event LISTs together: the API server matches each against every event of the namespace,
# so on a busy one they can take long; past this the post-mortem goes without them and says so.
EVENTS_READ_SECONDS = 30.0


async def group_pods(kube: Kube, key: JobKey, group: int) -> tuple[list[dict[str, Any]], list[str]]:
    """(the group's pods, notes on what could not be read)."""
    try:
        return await asyncio.to_thread(kube.job_pods, key.namespace, key.uid, group), []
    except refusals.TRANSIENT_ERRORS as error:
        return [], [f"the group's pods could not be read: {error}"]


async def group_events(
    kube: Kube, key: JobKey, pods: list[dict[str, Any]], within: float = EVENTS_READ_SECONDS
) -> tuple[list[dict[str, Any]], list[str]]:
    """(the events of the job and its `pods`, notes on what could not be read), in at most `within` s."""
    objects = [(key.name, key.uid, names.KIND)]
    objects += [(p["metadata"]["name"], p["metadata"]["uid"], "Pod") for p in pods if "metadata" in p]
    reads = [asyncio.to_thread(kube.pod_events, key.namespace, *object_) for object_ in objects]
    try:
        found = await asyncio.wait_for(asyncio.gather(*reads, return_exceptions=True), within)
    except TimeoutError:
        return [], [f"the events of {len(objects)} objects could not be read within {within:g} s"]
    events = [event for listed in found if isinstance(listed, list) for event in listed]
    failed = [error for error in found if isinstance(error, BaseException)]
    notes = []
    if failed:
        notes.append(f"the events of {len(failed)} of {len(found)} objects could not be read: {failed[0]}")
    return events, notes


async def postmortem_of(
    kube: Kube,
    key: JobKey,
    trainjob: Mapping[str, Any],
    group: int,
    status: Mapping[str, Any],
    posting: Sequence[tuple[str, str, str]],
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The group's pods, read now while they exist; and what reads the events of the job and of those pods
    later, off the reconcile, and builds the post-mortem (mwms_contract.postmortem.build) with `posting`, the
    events the ending decision posts as (type, reason, message)."""
    pods, notes = await group_pods(kube, key, group)
    now = format_time(datetime.now(UTC))

    async def build() -> dict[str, Any]:
        events, unread = await group_events(kube, key, pods)
        return postmortem.build(trainjob, group, status, pods, events, now, [*notes, *unread], posting)

    return build
