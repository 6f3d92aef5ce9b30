"""The kopf wiring: which handlers exist, and that none makes kopf put a finalizer on a TrainJob."""

from __future__ import annotations

import asyncio

import kopf

from mwms_operator import handlers
from mwms_operator.config import OperatorConfig


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
