"""The integration tier's shards (mwms_kit/shards.py): every module in exactly one shard, the same split
in every shard process, namespaces and operators kept apart by the shard's prefix."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mwms_kit import shards

REPO = Path(__file__).resolve().parents[2]
INTEGRATION = REPO / "tests" / "integration"


def integration_modules() -> list[str]:
    return sorted(str(p.relative_to(INTEGRATION)) for p in INTEGRATION.rglob("test_*.py"))


def test_every_module_goes_to_exactly_one_shard_and_the_split_does_not_depend_on_order():
    modules = integration_modules()
    split = shards.assign(modules)
    assert sorted(split) == modules
    assert set(split.values()) == set(shards.SHARDS)
    assert shards.assign(list(reversed(modules))) == split


def test_the_shards_carry_about_the_same_work():
    split = shards.assign(integration_modules())
    load = {
        s: sum(shards.WEIGHTS.get(m, shards.DEFAULT_WEIGHT) for m, t in split.items() if t == s)
        for s in split.values()
    }
    heaviest = max(shards.WEIGHTS.values())
    assert max(load.values()) - min(load.values()) <= heaviest


def test_every_weighed_module_exists():
    """A renamed module would keep its stale weight and fall back to the default unnoticed."""
    assert set(shards.WEIGHTS) <= set(integration_modules())


def test_a_shard_names_its_namespaces_and_its_operators_watch_only_those(monkeypatch):
    monkeypatch.setenv("MWMS_TEST_SHARD", "b")
    name = shards.namespace_name("t")
    assert name.startswith("b-t-")
    assert fnmatch.fnmatch(name, shards.watched_namespaces())
    monkeypatch.setenv("MWMS_TEST_SHARD", "a")
    assert not fnmatch.fnmatch(name, shards.watched_namespaces())


def test_unsharded_nothing_changes(monkeypatch):
    monkeypatch.delenv("MWMS_TEST_SHARD", raising=False)
    assert shards.namespace_name("t").startswith("t-")
    assert shards.watched_namespaces() is None


def test_an_unknown_shard_is_refused(monkeypatch):
    monkeypatch.setenv("MWMS_TEST_SHARD", "d")
    with pytest.raises(ValueError, match="MWMS_TEST_SHARD"):
        shards.current_shard()


def collected(shard: str | None, paths: tuple[str, ...] = ("tests/integration",)) -> list[str]:
    """The test ids that pytest collects under `paths` for a shard (None: unsharded), in the order it runs
    them."""
    env = {k: v for k, v in os.environ.items() if k not in ("MWMS_TEST_SHARD", "CI")}
    if shard:
        env["MWMS_TEST_SHARD"] = shard
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if line.startswith("tests/")]


def test_the_shards_together_collect_every_test_of_the_tier_once():
    whole = set(collected(None))
    parts = [set(collected(shard)) for shard in shards.SHARDS]
    assert whole and all(parts)
    assert set().union(*parts) == whole
    assert sum(len(part) for part in parts) == len(whole)


WAITING_MODULES = {  # marked waits_for_build: their builds run beside the tests (mwms_kit.runner)
    "tests/integration/operator/test_operator_kueue.py",
    "tests/integration/operator/test_operator_object_storage.py",
    "tests/scale/test_scale_smoke.py",
    "tests/static/test_static_monitoring.py",
}


def waits(test_id: str) -> bool:
    return test_id.split("::")[0] in WAITING_MODULES


SESSIONS = [(shard, ("tests/integration",)) for shard in shards.SHARDS]
SESSIONS.append((None, ("tests/scale", "tests/static")))  # the compute lane's last two tiers


@pytest.mark.parametrize("shard, paths", SESSIONS)
def test_the_tests_that_wait_on_a_background_build_run_last_in_their_session(shard, paths):
    ids = collected(shard, paths)
    order = [waits(test_id) for test_id in ids]
    assert order == sorted(order), [test_id for test_id in ids if waits(test_id)]


def test_each_shard_starts_its_spare_clusters_on_a_bridge_of_its_own(monkeypatch):
    offsets = set()
    for shard in shards.SHARDS:
        monkeypatch.setenv("MWMS_TEST_SHARD", shard)
        offsets.add(shards.spare_subnet_offset())
    # Not on the node tier's (+20), the README test's (+30) or the scale smoke test's (+5) bridge either.
    assert len(offsets) == len(shards.SHARDS) and not offsets & {0, 5, 20, 30}
