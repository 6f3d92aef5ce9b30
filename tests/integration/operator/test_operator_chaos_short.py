"""The short version of the bench's `chaos` scenario (the same experiments, mwms_bench.faults), with stand-in
workers: a worker SIGKILLed at a random moment of a job with a checkpoint PVC, and the operator SIGKILLed at
random moments of a job's life.
Outcomes are asserted (no timings): the whole group restarts and the job succeeds; no pod is ever created
twice; nothing in status is lost or repeated. The seed is fixed, so CI draws the same moments each run."""

from __future__ import annotations

import random

import pytest

from mwms_bench import faults
from mwms_kit.shards import namespace_prefix


@pytest.fixture(scope="module")
def chaos():
    return faults


@pytest.fixture
def lab(chaos, cluster, kubectl, operator, standin):
    # Its namespaces under the shard's prefix: the shard's operators watch only those (mwms_kit/shards.py).
    lab = chaos.FaultLab(
        kubectl, operator, cluster, standin, random.Random(20261202), namespace_prefix=namespace_prefix()
    )
    yield lab
    lab.watcher.stop()


def test_a_killed_worker_restarts_the_whole_group_and_the_job_succeeds(chaos, lab):
    result = chaos.worker_kill(lab, replicas=2, timeout=180)
    assert result["kill_landed"], f"the kill missed the worker: {result}"
    assert result["phase"] == "Succeeded", result
    assert result["restarts"] == 1, result
    assert result["pod_duplicates"] == {} and result["max_active_pods"] <= 2, result
    assert result["ok"], result


def test_a_killed_chief_restarts_the_whole_group_and_the_job_succeeds(chaos, lab):
    result = chaos.worker_kill(lab, chief=True, replicas=2, timeout=180)
    assert result["kill_landed"] and result["killed_worker"] == 0, result
    assert result["phase"] == "Succeeded" and result["restarts"] == 1, result
    assert result["pod_duplicates"] == {}, result


@pytest.mark.parametrize("trial", range(3))
def test_an_operator_killed_at_a_random_moment_loses_and_repeats_nothing(chaos, lab, trial, operator):
    lab.rng = random.Random(1000 + trial)
    result = chaos.operator_kill(lab, replicas=3, timeout=180)
    assert operator.process is not None and operator.process.poll() is None, "the operator is not running"
    assert result["phase"] == "Succeeded", result
    assert result["restarts"] == 1, f"the one group restart was lost or repeated: {result}"
    assert result["pod_duplicates"] == {} and result["max_active_pods"] <= 3, result
    assert result["status_complete"], result
