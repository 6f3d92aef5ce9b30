"""What is left of a group of workers as it ends, read for its post-mortem: its pods, whole, and the events of
the job and of those pods. What cannot be read is said in a note, never raised: a post-mortem with less in it
must not stop the reconcile that ended the group."""

from __future__ import annotations

import asyncio
from typing import Any

from mwms_contract import names
from mwms_operator.kube import refusals
from mwms_operator.kube.client import Kube
from mwms_operator.observe.state import JobKey


async def group_remains(
    kube: Kube, key: JobKey, group: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(the group's pods, the events of the job and its pods, notes on what could not be read)."""
    notes: list[str] = []
    try:
        pods = await asyncio.to_thread(kube.job_pods, key.namespace, key.uid, group)
    except refusals.TRANSIENT_ERRORS as error:
        pods = []
        notes.append(f"the group's pods could not be read: {error}")
    objects = [(names.KIND, key.name, key.uid)]
    objects += [("Pod", p["metadata"]["name"], p["metadata"]["uid"]) for p in pods if "metadata" in p]
    found = await asyncio.gather(
        *(asyncio.to_thread(kube.pod_events, key.namespace, name, uid, kind) for kind, name, uid in objects),
        return_exceptions=True,
    )
    events = [event for listed in found if isinstance(listed, list) for event in listed]
    failed = [error for error in found if isinstance(error, BaseException)]
    if failed:
        notes.append(f"the events of {len(failed)} of {len(found)} objects could not be read: {failed[0]}")
    return pods, events, notes
