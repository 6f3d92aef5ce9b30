"""hack/build/install-deps.sh, as a new user meets it: not root, on a PATH without the tools. It must name
everything missing in one message, print the one apt-get line, and stop before anything is built;
`make demo` and `make test` run it before any other step."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"  # util-linux; the env below has no PATH to find it
# Enough of a shell for the script itself; none of the tools it checks for.
BASICS = ("bash", "id", "uname", "sort", "df", "tail", "mkdir", "cat")
NEEDED_PACKAGES = [
    *("make", "git", "unzip", "iproute2", "util-linux", "buildah", "mmdebstrap", "runc", "containerd"),
    *("nftables", "gcc", "python3", "python3-venv"),
]


@pytest.fixture
def bare_machine() -> Iterator[Path]:
    """A world-readable folder with the script and a bin/ of the basics only (nobody must read both; pytest's
    tmp_path sits under a folder only root may enter)."""
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root (CI runs as root)")
    machine = Path(tempfile.mkdtemp(prefix="mwms-bare-machine-"))
    try:
        shutil.copytree(REPO / "hack", machine / "hack")
        (machine / "bin").mkdir()
        for tool in BASICS:
            found = shutil.which(tool)
            assert found, tool
            (machine / "bin" / tool).symlink_to(found)
        for path in (machine, machine / "hack", machine / "hack" / "build", machine / "bin"):
            path.chmod(0o755)
        yield machine
    finally:
        shutil.rmtree(machine)


def run_as_nobody(machine: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(machine / "bin"), "HOME": str(machine / "home"), "MWMS_CACHE": str(machine / "cache")}
    return subprocess.run(
        [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
         str(machine / "bin" / "bash"), str(machine / "hack" / "build" / "install-deps.sh"), *args],
        env=env, capture_output=True, text=True, timeout=60, cwd=machine,
    )  # fmt: skip


def test_not_root_without_tools_names_everything_in_one_message_and_builds_nothing(bare_machine):
    done = run_as_nobody(bare_machine, "demo")
    assert done.returncode == 1, done.stderr
    message = done.stderr
    assert message.count("cannot run on this machine yet") == 1  # one message, not one per problem
    (apt_line,) = re.findall(r"apt-get install -y (.*)", message)
    missing = apt_line.split()
    assert [p for p in NEEDED_PACKAGES if p not in missing] == [], message
    assert "Go >= 1.26 is needed" in message and "go.dev/dl" in message
    assert "root is needed" in message
    assert not (bare_machine / "cache").exists(), "nothing may be built or cached before the check passes"


def test_only_make_test_wants_the_kind_tiers_engine(bare_machine):
    def missing(target: str) -> list[str]:
        (apt_line,) = re.findall(r"apt-get install -y (.*)", run_as_nobody(bare_machine, target).stderr)
        return apt_line.split()

    assert {"docker.io", "libcap2-bin"} <= set(missing("test"))
    assert {"docker.io", "libcap2-bin"}.isdisjoint(missing("demo"))


def test_unknown_target_is_refused(bare_machine):
    done = run_as_nobody(bare_machine, "deploy")
    assert done.returncode == 2 and "unknown target 'deploy'" in done.stderr


def test_this_machine_passes_and_says_what_it_found():
    """CI's machine (root, packages installed by the script itself) passes without changing anything."""
    if os.geteuid() != 0:
        pytest.skip("installs need root (CI runs as root)")
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "build" / "install-deps.sh"), "test"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "install-deps: ok:" in done.stderr and "installing" not in done.stderr


def test_demo_and_test_check_the_host_before_anything_else():
    makefile = (REPO / "Makefile").read_text()
    for target in ("demo", "test"):
        (prerequisites,) = re.findall(rf"^{target}:(.*)$", makefile, re.M)
        assert prerequisites.split()[0] == f"deps-{target}", f"make {target} must check the host first"
        assert f"hack/build/install-deps.sh {target}" in makefile
