"""The kopf wiring: which handlers exist, that none makes kopf put a finalizer on a TrainJob, and what the
startup handler sets up."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kopf
from prometheus_client import REGISTRY

from mwms_operator import handlers
from mwms_operator.kube import client as k8s
from mwms_operator.settings import OperatorConfig


def test_no_handler_makes_kopf_put_a_finalizer_on_trainjobs():
    registry = kopf.OperatorRegistry()
    handlers.register(registry, OperatorConfig())
    assert not registry._spawning.get_all_handlers(), "timers and daemons add kopf's finalizer"
    assert not registry._changing.get_all_handlers(), "on.create/update/delete handlers add kopf's finalizer"
    assert {h.id for h in registry._watching.get_all_handlers()} == {"trainjob", "pod", "service"}
    assert {h.id for h in registry._indexing.get_all_handlers()} == {"job_pods", "job_services"}


def test_every_handler_runs_on_the_event_loop_not_in_kopfs_thread_pool():
    """kopf runs a sync handler in a thread: the reconciler's queue and state belong to the event loop."""
    registry = kopf.OperatorRegistry()
    handlers.register(registry, OperatorConfig())
    registered = [*registry._watching.get_all_handlers(), *registry._indexing.get_all_handlers()]
    assert registered and all(asyncio.iscoroutinefunction(h.fn) for h in registered)


class FakeReconciler:
    def __init__(self, *args: Any) -> None:
        pass

    def start(self) -> None:
        pass


def test_startup_runs_the_blocking_api_calls_on_as_many_threads_as_configured(monkeypatch):
    """asyncio's default pool has min(32, CPUs + 4) threads: 6 on 2 cores held pod creates back."""
    monkeypatch.setattr(k8s.Kube, "connect", classmethod(lambda cls, settings: None))
    monkeypatch.setattr(handlers, "Reconciler", FakeReconciler)
    monkeypatch.setattr(handlers.metrics, "serve", lambda port: None)
    threads = 33  # more than the default pool ever has
    registry = kopf.OperatorRegistry()
    handlers.register(registry, OperatorConfig(api_threads=threads))
    startup = next(h for h in registry._activities.get_all_handlers() if h.id == "startup")
    all_in_flight = threading.Barrier(threads, timeout=10)

    def call() -> str:
        all_in_flight.wait()  # BrokenBarrierError unless every call runs at once
        return threading.current_thread().name

    async def main() -> list[str]:
        await startup.fn(settings=kopf.OperatorSettings(), memo=kopf.Memo())
        return await asyncio.gather(*(asyncio.to_thread(call) for _ in range(threads)))

    names = asyncio.run(main())
    assert len(set(names)) == threads and all(name.startswith("api") for name in names)


class RecordingReconciler:
    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def test_every_watch_event_is_counted_by_resource_and_type_a_listed_object_as_list():
    """mwms_watch_events_total: the watches' cost per job, and whether kopf listed again after a lost
    watch."""

    registry = kopf.OperatorRegistry()
    handlers.register(registry, OperatorConfig())
    by_id = {h.id: h.fn for h in registry._watching.get_all_handlers()}
    memo = kopf.Memo(reconciler=RecordingReconciler())
    calls = {"trainjob": "trainjobs", "pod": "pods", "service": "services"}

    def counted(resource: str, type_: str) -> float:
        labels = {"resource": resource, "type": type_}
        return REGISTRY.get_sample_value("mwms_watch_events_total", labels) or 0.0

    before = {(r, t): counted(r, t) for r in calls.values() for t in ("LIST", "MODIFIED")}
    for handler in calls:
        for type_ in (None, "MODIFIED", "MODIFIED"):
            kwargs = {"job_pods": {}, "job_services": {}} if handler == "trainjob" else {}
            asyncio.run(by_id[handler](type=type_, body=kopf.Body({}), memo=memo, **kwargs))
    for resource in calls.values():
        assert counted(resource, "LIST") - before[(resource, "LIST")] == 1
        assert counted(resource, "MODIFIED") - before[(resource, "MODIFIED")] == 2
