"""kopf holds every handler of the operator until each watcher of an indexed resource (pods and Services, the
operator's indexes) has listed its namespace once, so that no job is judged on a half-filled index. kopf
1.45 never lifts the hold of a watcher it stops before that first list (its namespace gone: a CI run's,
deleted a moment after it was made), which held every job for ever; and a watch refused (403: no Role in a
namespace that MWMS_WATCH_NAMESPACES names) stops the whole operator, which restarts into the same refusal.
The repair: a stopped watcher's hold goes with it; a refused one's goes too, and its namespace is `unlisted`:
its jobs are left alone (one event each says why), never judged on a half-filled index (which could give a
job a second group), while the other namespaces' jobs go on."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from mwms_contract.conditions import NAMESPACE_UNLISTED
from mwms_operator.kube.client import Kube
from mwms_operator.kube.refusals import ApiError

log = logging.getLogger(__name__)
_unlisted: dict[str, str] = {}  # namespace -> which of its watches was refused, and how


def unlisted(namespace: str) -> str:
    """What to tell a job of a namespace one of whose watches was refused; "" if none was."""
    why = _unlisted.get(namespace)
    if why is None:
        return ""
    return (
        f"the operator could not list namespace {namespace} ({why}): the job is left alone; grant the "
        "operator's ServiceAccount list and watch on pods and services there (the chart does for "
        "operator.watchNamespaces), then restart the operator"
    )


async def tell(kube: Kube, job: Mapping[str, Any], said: str, status: Mapping[str, Any]) -> None:
    """A job of an unlisted namespace: one Warning event, and its `status` (the condition) where the operator
    may write it; a Role that grants read-only TrainJobs there refuses that (the event says it all)."""
    await asyncio.to_thread(kube.post_event, job, "Warning", NAMESPACE_UNLISTED, said)
    meta = job["metadata"]
    try:
        await asyncio.to_thread(kube.patch_status, meta["namespace"], meta["name"], status)
    except ApiError as error:
        level = logging.INFO if error.status == 403 else logging.WARNING
        where = f"{meta['namespace']}/{meta['name']}"
        log.log(level, "%s: its NamespaceUnlisted condition was not written: %s", where, error)


def release_with_their_watchers() -> bool:
    """Wrap kopf's terminate_redundancies (it stops the watchers of gone namespaces and resources) and its
    watcher so that a watcher's hold goes when it ends; False, changing nothing, where kopf has neither
    (another version: the unit tests check the pinned one)."""
    from kopf._cogs.clients.errors import APIForbiddenError
    from kopf._core.reactor import orchestration, queueing

    stop = getattr(orchestration, "terminate_redundancies", None)
    watch = getattr(queueing, "watcher", None)
    if stop is None or watch is None:
        return False
    if not getattr(stop, "releases_holds", False):
        orchestration.terminate_redundancies = _releasing_stopped(stop)  # type: ignore[assignment]
    if not getattr(watch, "releases_holds", False):
        queueing.watcher = _releasing_refused(watch, APIForbiddenError)  # type: ignore[assignment]
    return True


def _releasing_stopped(stop: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    @functools.wraps(stop)
    async def terminate_redundancies(
        *, remaining_namespaces: Collection[Any], ensemble: Any, **kwargs: Any
    ) -> None:
        watching = set(ensemble.watcher_tasks)
        await stop(remaining_namespaces=remaining_namespaces, ensemble=ensemble, **kwargs)
        # kopf names each watcher's hold "<resource>@<namespace>" (spawn_missing_watchers).
        stopped = {f"{key.resource}@{key.namespace}" for key in watching - set(ensemble.watcher_tasks)}
        for namespace in set(_unlisted) - set(remaining_namespaces):
            del _unlisted[namespace]  # gone: made again, it is listed afresh
        holds = [toggle for toggle in ensemble.operator_indexed if toggle.name in stopped]
        for toggle in holds:
            if toggle.is_off():
                log.warning("the watch of %s ended before its first list: it holds no job now", toggle.name)
        await ensemble.operator_indexed.drop_toggles(holds)

    terminate_redundancies.releases_holds = True  # type: ignore[attr-defined]
    return terminate_redundancies


def _releasing_refused(
    watch: Callable[..., Awaitable[None]], refused: type[Exception]
) -> Callable[..., Awaitable[None]]:
    @functools.wraps(watch)
    async def watcher(*, operator_indexed: Any = None, resource_indexed: Any = None, **kwargs: Any) -> None:
        try:
            await watch(operator_indexed=operator_indexed, resource_indexed=resource_indexed, **kwargs)
        except refused as error:
            namespace = kwargs.get("namespace")
            # Only a namespace's resource watchers: a cluster-wide one refused leaves nothing to serve, and
            # any other error keeps kopf's way (the operator stops, and its restart lists afresh).
            if operator_indexed is None or namespace is None:
                raise
            log.error(
                "the watch of %s@%s was refused (%s): its TrainJobs are left alone until the operator is "
                "restarted with the rights to list there (a Role, as the chart makes for "
                "operator.watchNamespaces); the other namespaces' jobs go on",
                kwargs.get("resource"),
                namespace,
                error,
            )
            _unlisted.setdefault(namespace, f"its {kwargs.get('resource')} list was refused: {error}")
            if resource_indexed is not None:
                await operator_indexed.drop_toggle(resource_indexed)
            # Ended, it would stop the operator (kopf re-raises a watcher's error): it waits to be stopped
            # with its namespace instead.
            await asyncio.Event().wait()

    watcher.releases_holds = True  # type: ignore[attr-defined]
    return watcher
