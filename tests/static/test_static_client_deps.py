"""The client's dependency ranges hold at both ends: `kubernetes` (a range, not a pin, so `pip install mwms`
fits beside other tools in a notebook image) at the oldest and the newest release client/pyproject.toml
allows, each in a fresh TensorFlow-free venv under /tmp, running the client's unit tests there.

Cost: two venvs from PyPI (about 40 s each on a warm pip cache, a few MB of wheels); skipped without network
outside CI. The tests of the operator's plugins and the trainer's local mode are left out: they need
mwms-operator, which a client-only install does not have, and so are the modules that import it. The test kit
goes in too: the tests import it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from static_support import REPO, missing_tool

CLIENT_ONLY = "not dev_packages and not local_runs"


def needing_the_operator() -> list[Path]:
    """The client's test modules that import mwms_operator at the top (to check the client against it)."""
    modules = sorted((REPO / "tests" / "unit" / "client").glob("test_*.py"))
    return [m for m in modules if re.search(r"^(from|import) mwms_operator\b", m.read_text(), re.M)]


def kubernetes_range() -> tuple[str, str]:
    deps = tomllib.loads((REPO / "client" / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("kubernetes")]
    match = re.fullmatch(r"kubernetes>=(\d+)\.(\d+),<(\d+)", spec)
    assert match, f"{spec}: expected kubernetes>=A.B,<C (a range with an upper bound, not a pin)"
    return f"{match[1]}.{match[2]}", match[3]


@pytest.mark.parametrize("end", ["oldest", "newest"])
def test_the_client_works_with_both_ends_of_its_kubernetes_range(end, tmp_path_factory):
    oldest, below = kubernetes_range()
    wanted = f"kubernetes=={oldest}.*" if end == "oldest" else f"kubernetes<{below}"
    venv = tmp_path_factory.mktemp(f"client-{end}") / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    installed = subprocess.run(
        [*pip, "pytest", str(REPO / "contract"), str(REPO / "client"), "-e", str(REPO / "tests/kit"), wanted],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if installed.returncode != 0:
        if "ResolutionImpossible" in installed.stderr or "conflict" in installed.stderr:
            pytest.fail(f"{wanted} does not install with the client:\n{installed.stderr[-2000:]}")
        missing_tool(f"pip could not build the venv (no network?): {installed.stderr.strip()[-300:]}")
    python = venv / "bin" / "python"
    version = subprocess.run(
        [python, "-c", "import kubernetes, tensorflow"], capture_output=True, text=True
    )  # tf-free: the import of tensorflow must fail, kubernetes' must not
    assert "No module named 'tensorflow'" in version.stderr, version.stderr
    got = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('kubernetes'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert got.startswith(f"{oldest}.") if end == "oldest" else int(got.split(".")[0]) < int(below)
    ignored = [f"--ignore={module}" for module in needing_the_operator()]
    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", REPO,
         "-c", REPO / "pyproject.toml", "-k", CLIENT_ONLY, *ignored, REPO / "tests" / "unit" / "client"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path_factory.getbasetemp(),
        env={"PATH": "/usr/bin:/bin", "HOME": str(venv.parent)},
    )  # fmt: skip
    assert tests.returncode == 0, f"kubernetes {got}:\n{tests.stdout[-4000:]}\n{tests.stderr[-2000:]}"
