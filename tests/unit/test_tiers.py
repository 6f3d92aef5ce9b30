"""mwms_kit/tiers.py, run as pytest runs it: in a pytest process of its own over a small tests/ tree,
with and without CI set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = {
    "tests/conftest.py": """
from mwms_kit.tiers import TierReport

def pytest_configure(config):
    config.pluginmanager.register(TierReport(), "mwms-tiers")
""",
    "tests/unit/test_a.py": """
import pytest

def test_passes():
    pass

def test_skips():
    pytest.skip("no containerd on this machine")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False
""",
    "tests/node/test_b.py": """
import pytest

@pytest.fixture
def node():
    pytest.skip("not root")

def test_needs_a_node(node):
    pass
""",
}
MODULE_SKIP = {
    "tests/tf/test_c.py": """
import pytest
pytest.importorskip("a_module_that_is_not_installed")
""",
}


def run(tmp_path: Path, ci: str | None, **extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    for name, text in {**SAMPLE, **extra}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["MWMS_TIER_REPORT"] = str(tmp_path / "tiers.json")
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done, json.loads((tmp_path / "tiers.json").read_text())


def test_outside_ci_skips_stay_skips_and_each_tier_is_counted(tmp_path):
    done, tiers = run(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout
    assert (tiers["unit"]["passed"], tiers["unit"]["skipped"], tiers["unit"]["failed"]) == (1, 2, 0)
    assert tiers["node"]["skipped"] == 1
    assert "tiers" in done.stdout and "unit" in done.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_tier_that_cannot_run_fails_naming_tier_and_reason(tmp_path, ci):
    done, tiers = run(tmp_path, ci=ci)
    assert done.returncode == 1, done.stdout
    assert "the unit tier could not run" in done.stdout and "no containerd on this machine" in done.stdout
    assert "the node tier could not run" in done.stdout and "not root" in done.stdout
    assert tiers["unit"]["failed"] == 1 and tiers["unit"]["skipped"] == 1  # the xfail stays what it is
    assert tiers["node"]["errors"] == 1


def test_ci_false_is_not_ci(tmp_path):
    done, _ = run(tmp_path, ci="false")
    assert done.returncode == 0, done.stdout


def test_under_ci_a_module_that_skips_whole_fails_the_run(tmp_path):
    done, _ = run(tmp_path, ci="true", **MODULE_SKIP)
    assert done.returncode != 0, done.stdout
    assert "the tf tier could not collect" in done.stdout and "a_module_that_is_not_installed" in done.stdout
    done, _ = run(tmp_path / "local", ci=None, **MODULE_SKIP)
    assert done.returncode == 0, done.stdout
