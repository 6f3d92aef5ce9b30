"""`make test`'s runner (mwms_kit.runner, hack/ci/run-tests.py): what it counts as passed, and that .ci/run
runs it as CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mwms_kit import runner
from mwms_kit.tiers import TIERS

REPO = Path(__file__).resolve().parents[2]


def crash() -> int:
    raise RuntimeError("the runner's own bug")


def test_every_tier_runs_in_a_lane_of_make_test():
    """A tier left out of both lanes would never run in CI, green or not."""
    lanes = ["tests/integration", *runner.AFTER_INTEGRATION, *runner.COMPUTE_TIERS]
    assert sorted(lanes) == sorted(f"tests/{tier}" for tier in TIERS)


def test_a_body_whose_thread_crashed_counts_as_failed_never_passed():
    codes = runner.side_by_side({"fine": lambda: 0, "crashed": crash})
    assert codes == {"fine": 0, "crashed": runner.CRASHED}
    assert runner.first_failure(list(codes.values())) == runner.CRASHED


def test_a_shard_whose_thread_crashed_fails_the_integration_tier(monkeypatch, tmp_path):
    ready = tmp_path / "shared-cluster.json"
    monkeypatch.setattr(runner, "start_shared_cluster", lambda: (None, ready))
    monkeypatch.setattr(runner, "stop", lambda owner: None)
    ran = []

    def run_pytest(name: str, *args: object) -> int:
        ran.append(name)
        if name == "integration-b":
            raise OSError("no space left on device")
        return 0

    monkeypatch.setattr(runner, "run_pytest", run_pytest)
    assert runner.integration_tier([]) == runner.CRASHED
    assert sorted(ran) == ["integration-a", "integration-b", "integration-c", "integration-exclusive"]


def test_a_lane_whose_thread_crashed_fails_the_run(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(runner, "RESULTS", tmp_path)
    monkeypatch.setattr(runner, "compute_lane", lambda pytest_args: crash())
    assert runner.main(["--lanes", "compute", "--no-builds"]) == 1
    out = capsys.readouterr().out
    assert "the runner's thread crashed" in out and "FAILED: compute" in out


def test_the_runner_adds_up_a_tier_that_several_sessions_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "RESULTS", tmp_path)
    count = {"passed": 3, "failed": 1, "errors": 0, "skipped": 0, "started": 100.0, "ended": 160.0}
    (tmp_path / "integration-a.json").write_text(json.dumps({"integration": count}))
    later = {**count, "passed": 2, "failed": 0, "started": 130.0, "ended": 400.0}
    (tmp_path / "integration-b.json").write_text(json.dumps({"integration": later, "controlplane": count}))
    tiers = runner.merged_tiers()
    assert tiers["integration"] == {**count, "passed": 5, "failed": 1, "started": 100.0, "ended": 400.0}
    assert tiers["controlplane"] == count
    assert runner.first_failure([0, 1, 2]) == 1
    assert runner.first_failure([0, 0]) == 0


@pytest.mark.parametrize("ci", ["true", ""])
def test_no_test_collected_passes_outside_ci_only(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    assert (runner.first_failure([5]) == 0) is (ci == "")


def test_hack_ci_run_tests_says_how_to_use_it():
    done = subprocess.run(
        [sys.executable, str(REPO / "hack/ci/run-tests.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--lanes" in done.stdout and "--shards" in done.stdout


def test_ci_run_sets_ci_itself(tmp_path):
    """Whoever calls .ci/run, `make test` runs under CI=true, where a tier that cannot run fails."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "hack" / "build").mkdir(parents=True)
    (tmp_path / "hack" / "build" / "install-deps.sh").write_text("true\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text('#!/bin/sh\necho "make $* with CI=$CI"\n')
    (bin_dir / "make").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "make test with CI=true" in done.stdout


def test_the_summary_names_each_failed_test_of_this_run(monkeypatch, tmp_path):
    """CI keeps only the end of the log: the failed tests must be named there."""
    monkeypatch.setattr(runner, "RESULTS", tmp_path)
    (tmp_path / "compute.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.tf.test_x" name="test_ok"/>'
        '<testcase classname="tests.tf.test_x" name="test_hangs">'
        '<failure message="AssertionError: no peer after 600 s&#10;more">trace</failure></testcase>'
        '<testcase classname="tests.tf.test_y" name="test_setup"><error message="fixture broke"/></testcase>'
        "</testsuite></testsuites>"
    )
    stale = tmp_path / "cluster.xml"
    stale.write_text(
        '<testsuite><testcase classname="a" name="b"><failure message="old"/></testcase></testsuite>'
    )
    os.utime(stale, (1, 1))
    assert runner.failed_tests(since=runner.time.monotonic() - 60) == [
        "FAILURE tests.tf.test_x::test_hangs (compute): AssertionError: no peer after 600 s",
        "ERROR tests.tf.test_y::test_setup (compute): fixture broke",
    ]


def test_a_junit_file_cut_short_is_named_not_a_crash(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "RESULTS", tmp_path)
    monkeypatch.setattr(runner, "REPO", tmp_path.parent)
    (tmp_path / "cluster.xml").write_text('<testsuites><testsuite><testcase classname="a" name=')
    (line,) = runner.failed_tests(since=runner.time.monotonic() - 60)
    assert line.startswith(f"UNREADABLE {tmp_path.name}/cluster.xml (") and line.endswith("see cluster.log")
