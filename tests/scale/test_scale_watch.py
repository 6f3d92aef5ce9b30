"""The scale bench's pod watch counts what the smoke test asserts on (bench/scale/watch.py): pods of one
worker alive at once, the most pods of a job alive at once, and when a group counts as Running. On records
made by hand, no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from mwms_kit import modules


@pytest.fixture(scope="module")
def watch() -> Any:
    return modules.load("mwms_scale_watch", "bench/scale/watch.py")


def watcher(watch: Any, *pods: tuple[str, str, str, float, float | None, float | None]) -> Any:
    """(uid, restart, index, added, running, deleting) of job `j` in namespace `ns`."""
    w = watch.PodWatcher(core=None)
    for uid, restart, index, added, running, deleting in pods:
        w.pods[uid] = watch.PodRecord("ns", "j", restart, index, added, running=running, deleting=deleting)
    return w


def test_a_group_restarted_after_the_last_one_was_deleted_is_no_duplicate_and_never_over_replicas(watch):
    w = watcher(
        watch,
        ("a", "0", "0", 1.0, 2.0, 5.0),
        ("b", "0", "1", 1.0, 2.0, 5.0),
        ("c", "1", "0", 6.0, 7.0, None),
        ("d", "1", "1", 6.0, 7.0, None),
    )
    assert w.duplicates("ns") == {}
    assert w.most_alive("ns") == {"j": 2}
    assert set(w.running("ns", 2, "1")) == {"j"}


def test_a_new_group_created_while_the_last_ones_pods_live_is_over_replicas(watch):
    w = watcher(
        watch,
        ("a", "0", "0", 1.0, 2.0, 5.0),
        ("b", "0", "1", 1.0, 2.0, None),  # never deleted
        ("c", "1", "0", 6.0, 7.0, None),
        ("d", "1", "1", 6.0, 7.0, None),
    )
    assert w.most_alive("ns") == {"j": 3}


def test_two_pods_of_one_worker_at_once_are_a_duplicate(watch):
    w = watcher(watch, ("a", "0", "0", 1.0, 2.0, None), ("b", "0", "0", 3.0, None, None))
    assert w.duplicates("ns") == {"j/0/0": 2}
    assert w.most_alive("ns") == {"j": 2}


def test_a_pod_deleted_before_it_ran_is_left_out_of_its_group(watch):
    """The operator deletes a batch it could create only in part, and creates the group whole again."""
    w = watcher(
        watch,
        ("a", "0", "0", 1.0, None, 1.5),
        ("b", "0", "0", 2.0, 3.0, None),
        ("c", "0", "1", 2.0, None, None),
    )
    assert w.duplicates("ns") == {}
    assert w.running("ns", 2) == {}  # worker 1 has not run yet
    w.pods["c"].running = 3.0
    assert [r.index for r in w.running("ns", 2)["j"]] == ["0", "1"]
