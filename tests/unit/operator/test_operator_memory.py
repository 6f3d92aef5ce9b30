"""The operator hands the C allocator's free memory back to the system now and then (memory.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from mwms_operator.reconciler import Reconciler
from mwms_operator.settings import OperatorConfig
from mwms_operator.telemetry import memory

FRAGMENT = """
import random, sys
from mwms_operator.telemetry import memory

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

random.seed(1)
kept, freed = [], []
for i in range(100_000):  # strings too large for Python's own allocator: glibc's heap, as JSON bodies are
    (kept if i % 8 == 0 else freed).append("x" * random.randint(600, 3000))
freed.clear()  # free, but below the kept ones: not at the heap's top, so glibc keeps it
before = rss_mib()
assert memory.release_free_memory()
print(before - rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_memory_freed_below_the_top_of_the_heap_goes_back_to_the_system():
    released = subprocess.run([sys.executable, "-c", FRAGMENT], capture_output=True, text=True, check=True)
    assert float(released.stdout) > 50, "~150 MiB were freed; without malloc_trim the RSS stays"


def test_the_resync_hands_back_free_memory_each_interval(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append("released") or True)
    rec = Reconciler(object(), OperatorConfig(reconcile_interval_seconds=0.0))  # type: ignore[arg-type]
    monkeypatch.setattr(rec, "resync", lambda: calls.append("resync"))

    async def two_rounds() -> None:
        task = asyncio.get_running_loop().create_task(rec._resync_forever())
        while calls.count("released") < 2:
            await asyncio.sleep(0)
        task.cancel()

    asyncio.run(asyncio.wait_for(two_rounds(), 30))
    assert calls[:4] == ["resync", "released", "resync", "released"]


def test_watch_events_lose_their_managed_fields_and_nothing_else():
    event = {
        "type": "MODIFIED",
        "object": {
            "metadata": {"name": "w-0", "labels": {"a": "b"}, "managedFields": [{"manager": "kubelet"}]},
            "status": {"phase": "Running"},
        },
    }
    assert memory.without_managed_fields(event) == {
        "type": "MODIFIED",
        "object": {"metadata": {"name": "w-0", "labels": {"a": "b"}}, "status": {"phase": "Running"}},
    }
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 410}}  # no metadata: left as it is
    assert memory.without_managed_fields(dict(error)) == error


def test_kopf_parses_its_watch_stream_without_managed_fields(monkeypatch):
    """On the kopf version pinned: its api.stream parses each line with the module's `json.loads`, which
    slim_watch_events replaces (a kopf that parses otherwise makes this fail, not the operator)."""
    import inspect
    import json

    from kopf._cogs.clients import api

    monkeypatch.setattr(api, "json", json)
    assert "json.loads(line" in inspect.getsource(api.stream)
    assert memory.slim_watch_events()
    assert memory.slim_watch_events()  # a second call changes nothing
    line = b'{"type": "ADDED", "object": {"metadata": {"name": "w-0", "managedFields": [{}]}}}'
    assert api.json.loads(line.decode()) == {"type": "ADDED", "object": {"metadata": {"name": "w-0"}}}
    assert api.json.dumps({"a": 1}) == '{"a": 1}'  # the rest of the module as it was
