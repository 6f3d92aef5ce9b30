"""Thread pools from MWMS_THREADS or the cgroup's CPU quota (v1 and v2 layouts, written under tmp_path)."""

from __future__ import annotations

import os

import pytest

from mwms_trainer.cpus import cgroup_cpu_limit, thread_count
from mwms_trainer.errors import ConfigError

CORES = os.cpu_count() or 1


def _v1(root, quota, period=100000, controller="cpu"):
    (root / controller).mkdir(parents=True)
    (root / controller / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / controller / "cpu.cfs_period_us").write_text(f"{period}\n")
    return root


def test_cgroup_v2_cpu_max(tmp_path):
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 0.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


@pytest.mark.parametrize("controller", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1_quota_and_period(tmp_path, controller):
    assert cgroup_cpu_limit(_v1(tmp_path, 150000, controller=controller)) == 1.5


def test_cgroup_v1_unlimited_and_no_cgroup(tmp_path):
    assert cgroup_cpu_limit(_v1(tmp_path / "a", -1)) is None
    assert cgroup_cpu_limit(tmp_path / "missing") is None


def test_thread_count_rounds_the_limit_up_within_the_cores(tmp_path):
    assert thread_count({}, _v1(tmp_path / "half", 50000)) == 1
    assert thread_count({}, _v1(tmp_path / "one-and-a-half", 150000)) == min(2, CORES)
    assert thread_count({}, _v1(tmp_path / "many", 100000 * (CORES + 8))) == CORES
    assert thread_count({}, tmp_path / "none") is None


def test_mwms_threads_wins_and_is_validated(tmp_path):
    assert thread_count({"MWMS_THREADS": "3"}, _v1(tmp_path, 50000)) == 3
    for bad in ("0", "-1", "two"):
        with pytest.raises(ConfigError) as err:
            thread_count({"MWMS_THREADS": bad}, tmp_path)
        assert err.value.setting == "MWMS_THREADS"
