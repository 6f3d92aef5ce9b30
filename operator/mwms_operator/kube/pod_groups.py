"""PodGroups (native gang scheduling) at the API server: whether it serves their API, asked once and then
rarely (an answer is kept for minutes, a "no" for less, so a cluster that turns the API on is noticed soon;
one reconcile asks for all at a time), creating a group's PodGroup and deleting those of earlier groups."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from mwms_contract import names
from mwms_operator.kube.client import Kube
from mwms_operator.kube.refusals import TRANSIENT_ERRORS, ApiError

log = logging.getLogger(__name__)
# How long an answer is kept: "served" changes only when the cluster's feature gates do.
SERVED_FOR_SECONDS, NOT_SERVED_FOR_SECONDS = 600.0, 60.0


class PodGroups:
    """The PodGroup API as the reconciler uses it: `served()` asks the API server once its answer is old."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.clock = kube, clock
        self._served: bool | None = None
        self._until = 0.0
        self._lock = asyncio.Lock()

    async def served(self) -> bool:
        """Whether PodGroups can be created; a failed look keeps the last answer (and raises if none)."""
        if self._served is None or self.clock() >= self._until:
            async with self._lock:
                if self._served is None or self.clock() >= self._until:
                    await self._look()
        assert self._served is not None
        return self._served

    async def _look(self) -> None:
        api = names.POD_GROUP_API_VERSION
        try:
            served = await asyncio.to_thread(self.kube.serves, api, names.POD_GROUP_PLURAL)
        except TRANSIENT_ERRORS:
            if self._served is None:
                raise  # the reconcile fails and is retried: no job is decided without an answer
            self._until = self.clock() + NOT_SERVED_FOR_SECONDS
            log.info("could not ask whether %s is served: kept the last answer (%s)", api, self._served)
            return
        if served != self._served:
            log.info("native gang scheduling: %s podgroups %s", api, "served" if served else "not served")
        self._served = served
        self._until = self.clock() + (SERVED_FOR_SECONDS if served else NOT_SERVED_FOR_SECONDS)

    async def create(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Creates the PodGroup (nothing if the job's is there); errors as Kube.create_pod's. A 404 for the
        API itself (it was turned off): it is asked about again at the next reconcile."""
        try:
            await asyncio.to_thread(self.kube.create_pod_group, namespace, body)
        except ApiError as error:
            if error.status == 404:
                self._until = 0.0
            raise

    async def delete_earlier(self, namespace: str, selector: str) -> None:
        """Deletes the job's PodGroups the selector matches: each goes once its pods are gone (its
        finalizer). Only tidying (the job's delete takes them too), so a refusal is logged, not retried."""
        try:
            await asyncio.to_thread(self.kube.delete_pod_groups, namespace, selector)
        except TRANSIENT_ERRORS as error:
            log.warning(
                "%s: the PodGroups of earlier groups (%s) were not deleted: %s", namespace, selector, error
            )
