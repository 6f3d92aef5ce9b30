"""kopf's own orchestration (the pinned version), with its watchers stood in for: the hold a namespace's pods
watcher puts on every handler goes when kopf stops that watcher for a namespace that is gone, or when the
watcher fails before its first list; the jobs of a namespace so left unlisted are told, never judged."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients.errors import APIForbiddenError, APIServerError
from kopf._cogs.structs import references
from kopf._core.reactor import orchestration, queueing

from mwms_kit.trainjobs import trainjob
from mwms_operator.kube import index_holds
from mwms_operator.kube.refusals import ApiError
from mwms_operator.observe.state import JobKey
from mwms_operator.reconciler import Reconciler
from mwms_operator.settings import OperatorConfig

PODS = references.Resource(group="", version="v1", plural="pods", namespaced=True)


async def holds_after_namespace_gone(monkeypatch, repaired: bool) -> tuple[bool, list[str]]:
    monkeypatch.setattr(orchestration, "terminate_redundancies", orchestration.terminate_redundancies)
    if repaired:
        assert index_holds.release_with_their_watchers()
        assert index_holds.release_with_their_watchers()  # a second call changes nothing
    paused = aiotoggles.ToggleSet(any)
    ensemble = orchestration.Ensemble(
        operator_indexed=aiotoggles.ToggleSet(all),
        operator_paused=paused,
        peering_missing=await paused.make_toggle(name="peering"),
    )
    for namespace, listed in (("kept", True), ("gone", False)):
        hold = await ensemble.operator_indexed.make_toggle(listed, name=f"{PODS}@{namespace}")
        assert hold.name == f"pods.v1@{namespace}"  # as spawn_missing_watchers names it
        watcher = asyncio.create_task(asyncio.sleep(3600))
        ensemble.watcher_tasks[orchestration.EnsembleKey(resource=PODS, namespace=namespace)] = watcher
    await orchestration.terminate_redundancies(
        remaining_resources={PODS}, remaining_namespaces={"kept", None}, ensemble=ensemble
    )
    return ensemble.operator_indexed.is_on(), sorted(str(t.name) for t in ensemble.operator_indexed)


def test_a_namespace_gone_before_its_first_list_no_longer_holds_the_operator(monkeypatch):
    assert asyncio.run(holds_after_namespace_gone(monkeypatch, repaired=True)) == (True, ["pods.v1@kept"])


def test_without_the_repair_kopf_keeps_the_hold_for_ever(monkeypatch):
    """Why the repair exists: a kopf that drops the hold itself makes this fail (the repair can then go)."""
    assert asyncio.run(holds_after_namespace_gone(monkeypatch, repaired=False)) == (
        False,
        ["pods.v1@gone", "pods.v1@kept"],
    )


FORBIDDEN = APIForbiddenError("pods is forbidden: User cannot list resource pods", status=403, headers={})
UNAVAILABLE = APIServerError("the server is currently unable to handle the request", status=503, headers={})


async def after_watcher_failed(
    monkeypatch, namespace: str | None, error: Exception = FORBIDDEN
) -> tuple[bool, str]:
    """(whether the hold is gone, what the namespace's jobs are told); the watcher runs on until stopped
    (ended, kopf would stop the operator) where its hold went, and fails as before where it stays."""

    async def failing_watcher(**_: object) -> None:
        raise error

    monkeypatch.setattr(queueing, "watcher", failing_watcher)
    monkeypatch.setattr(index_holds, "_unlisted", {})
    assert index_holds.release_with_their_watchers()
    operator_indexed = aiotoggles.ToggleSet(all)
    hold = await operator_indexed.make_toggle(False, name=f"{PODS}@{namespace}")
    watcher = asyncio.create_task(
        queueing.watcher(
            operator_indexed=operator_indexed, resource_indexed=hold, resource=PODS, namespace=namespace
        )
    )
    lifted = asyncio.create_task(operator_indexed.wait_for(True))
    done, _ = await asyncio.wait([watcher, lifted], timeout=5, return_when=asyncio.FIRST_COMPLETED)
    lifted.cancel()
    if watcher in done:
        with pytest.raises(type(error)):
            await watcher
    else:
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher
    return operator_indexed.is_on(), index_holds.unlisted(str(namespace))


def test_a_namespace_whose_watch_is_refused_holds_no_other_job_and_its_jobs_are_told(monkeypatch):
    on, told = asyncio.run(after_watcher_failed(monkeypatch, "team-b"))
    assert on, "the other namespaces' jobs go on"
    assert told.startswith(
        "the operator could not list namespace team-b (its pods.v1 list was refused: pods is forbidden"
    ), told
    assert "then restart the operator" in told, told
    assert index_holds.unlisted("team-a") == ""


def test_a_cluster_wide_watch_that_is_refused_keeps_its_hold(monkeypatch):
    """Nothing could be served on a half-filled index there: the hold stays, as kopf keeps it."""
    assert asyncio.run(after_watcher_failed(monkeypatch, None)) == (False, "")


def test_a_watch_that_fails_otherwise_keeps_kopfs_way(monkeypatch):
    """A 5xx that outlasts kopf's retries stops the operator, as before: its restart lists afresh."""
    assert asyncio.run(after_watcher_failed(monkeypatch, "team-b", UNAVAILABLE)) == (False, "")


@pytest.mark.parametrize("status_write", [200, 403])
def test_a_job_of_an_unlisted_namespace_is_left_alone_and_told_once(monkeypatch, status_write):
    """Told by an event, and by its condition where the operator may write its status (a Role that grants
    TrainJobs read-only refuses that write: the event alone tells, and the reconcile goes on)."""
    monkeypatch.setattr(index_holds, "_unlisted", {"team-b": "its pods.v1 list was refused: forbidden"})
    posted: list[tuple[str, str]] = []
    patched: list[tuple[str, str, dict]] = []

    def patch_status(namespace: str, name: str, status: dict) -> dict:
        if status_write == 403:
            raise ApiError(403, 'trainjobs.mwms.dev "mnist" is forbidden: cannot patch resource status')
        patched.append((namespace, name, status))
        return {"status": status}

    kube = SimpleNamespace(
        post_event=lambda body, type_, reason, message: posted.append((reason, message)),
        patch_status=patch_status,
    )
    reconciler = Reconciler(kube, OperatorConfig())  # type: ignore[arg-type]  # only these two are called
    reconciler.bind({}, {})
    key = JobKey("team-b", "mnist", "uid-1")
    running = {"type": "Running", "status": "True", "reason": "AllWorkersRunning", "message": "4 of 4"}
    job = trainjob("mnist", 2, namespace="team-b", metadata={"uid": "uid-1", "generation": 3})
    reconciler.state.job_event("ADDED", job | {"status": {"phase": "Running", "conditions": [running]}})
    asyncio.run(reconciler.reconcile(key))
    asyncio.run(reconciler.reconcile(key))
    assert [reason for reason, _ in posted] == ["NamespaceUnlisted"], posted
    assert "could not list namespace team-b (its pods.v1 list was refused: forbidden)" in posted[0][1]
    if status_write == 403:
        assert patched == []
        return
    [(namespace, name, status)] = patched
    assert (namespace, name) == ("team-b", "mnist")
    kept, unlisted = status["conditions"]  # a merge patch replaces the list: the Running condition stays
    assert kept["type"] == "Running" and kept["status"] == "True", kept
    assert (unlisted["type"], unlisted["status"], unlisted["reason"]) == (
        "NamespaceUnlisted",
        "True",
        "WatchRefused",
    )
    assert unlisted["message"] == posted[0][1] and unlisted["observedGeneration"] == 3, unlisted


def test_an_unlisted_namespace_deleted_and_made_again_is_listed_afresh(monkeypatch):
    monkeypatch.setattr(index_holds, "_unlisted", {"gone": "its pods.v1 list was refused: forbidden"})
    asyncio.run(holds_after_namespace_gone(monkeypatch, repaired=True))
    assert index_holds.unlisted("gone") == ""
