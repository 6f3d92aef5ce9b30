"""mwms_kit/tiers.py, run as pytest runs it: in a pytest process of its own over a small tests/ tree,
with and without CI set; and the real tree's tiers: each folder is a tier with its own marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mwms_kit.tiers import TIERS

REPO = Path(__file__).resolve().parents[2]
SAMPLE = {
    "tests/conftest.py": """
from mwms_kit.tiers import Tiers

def pytest_configure(config):
    config.pluginmanager.register(Tiers(), "mwms-tiers")
""",
    "tests/unit/test_a.py": """
import pytest

def test_passes(request):
    assert [mark.name for mark in request.node.iter_markers()] == ["unit"]

def test_skips():
    pytest.skip("no containerd on this machine")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False
""",
    "tests/e2e/test_e.py": """
def test_marked_by_its_folder(request):
    assert [mark.name for mark in request.node.iter_markers()] == ["e2e"]
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


SKIPIF = {
    "tests/tf/test_d.py": """
import pytest
pytestmark = pytest.mark.skipif(True, reason="no TensorFlow here")

def test_one():
    pass

def test_two():
    pass
""",
}


def run(
    tmp_path: Path, ci: str | None, *args: str, **extra: str
) -> tuple[subprocess.CompletedProcess[str], dict]:
    for name, text in {**SAMPLE, **extra}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["MWMS_TIER_REPORT"] = str(tmp_path / "tiers.json")
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", *(args or ["tests"])],
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


def test_under_ci_a_module_that_skips_whole_fails_that_module_only(tmp_path):
    """The session goes on: the other modules and tiers still run and are counted."""
    done, tiers = run(tmp_path, "true", **MODULE_SKIP, **SKIPIF)
    assert done.returncode == 1, done.stdout
    assert "the tf tier could not collect tests/tf/test_c.py" in done.stdout
    assert "a_module_that_is_not_installed" in done.stdout and "Interrupted" not in done.stdout
    assert "the tf tier could not run tests/tf/test_d.py::test_one" in done.stdout
    assert "no TensorFlow here" in done.stdout
    # The module that skipped whole fails; each test its skipif skipped fails in its setup.
    assert (tiers["tf"]["failed"], tiers["tf"]["errors"]) == (1, 2)
    assert tiers["unit"]["passed"] == 1 and tiers["node"]["errors"] == 1
    done, tiers = run(tmp_path / "local", None, **MODULE_SKIP, **SKIPIF)
    assert done.returncode == 0, done.stdout
    assert tiers["tf"] == {**tiers["tf"], "failed": 0, "skipped": 2}


def test_a_tests_tier_is_its_folder_and_its_marker_selects_the_same_tests(tmp_path):
    """Each sample test checks it carries its folder's marker and no other; `-m` selects by it."""
    done, tiers = run(tmp_path, None, "-m", "e2e", "tests")
    assert done.returncode == 0, done.stdout
    assert list(tiers) == ["e2e"] and tiers["e2e"]["passed"] == 1


def test_every_folder_of_tests_is_a_tier_with_its_marker_registered():
    folders = {p.parent.relative_to(REPO / "tests").parts[0] for p in (REPO / "tests").rglob("test_*.py")}
    assert folders - {"data", "kit"} == set(TIERS)
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert set(TIERS) <= {marker.split(":")[0] for marker in markers}
