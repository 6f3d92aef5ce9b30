"""A group's pods created together or not at all: if the API server refuses any, those it created are deleted
again (they must not hold quota or wait for peers meanwhile) and the worst refusal is raised."""

from __future__ import annotations

import asyncio
from typing import Any

from mwms_operator.kube import refusals
from mwms_operator.kube.client import Kube


async def create_all(
    kube: Kube, namespace: str, pods: list[dict[str, Any]], *, dry_run: bool
) -> list[tuple[str, str]]:
    """Creates the pods at once: the (name, uid) of those really created (None = the job's pod was there
    already: a retried or lagging reconcile, no event spam)."""
    results = await asyncio.gather(
        *(asyncio.to_thread(kube.create_pod, namespace, pod, dry_run=dry_run) for pod in pods),
        return_exceptions=True,
    )
    created = [
        (pod["metadata"]["name"], uid)
        for pod, uid in zip(pods, results, strict=True)
        if isinstance(uid, str) and not dry_run
    ]
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        await delete_pods(kube, namespace, created)
        raise refusals.worst(errors)
    return created


async def delete_pods(kube: Kube, namespace: str, pods: list[tuple[str, str]]) -> None:
    """(name, uid) pairs: each is deleted only while its name is still that uid's."""
    await asyncio.gather(*(asyncio.to_thread(kube.delete_pod, namespace, n, u) for n, u in pods))
