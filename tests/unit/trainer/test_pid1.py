"""pid1.py as the real PID 1 of a new PID namespace (unshare, as root): signals end the child, codes pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwms_kit.pid_namespace import AVAILABLE, WHY_NOT, pid1_of, wait_for_file
from mwms_kit.pid_namespace import start_as_pid1 as as_pid1
from mwms_trainer import pid1

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT)


def sleeper(ready: Path, ignore_sigterm: bool = False) -> list[str]:
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_sigterm else ""
    code = f"import pathlib, signal, time; {ignore}pathlib.Path({str(ready)!r}).touch(); time.sleep(120)"
    return [sys.executable, "-c", code]


def test_exit_code_of_a_wait_status():
    assert pid1.exit_code(0) == 0
    assert pid1.exit_code(75 << 8) == 75
    assert pid1.exit_code(signal.SIGTERM) == 143
    assert pid1.exit_code(signal.SIGKILL) == 137


def test_sigterm_to_pid1_ends_a_child_that_ignores_nothing(tmp_path):
    proc = as_pid1([sys.executable, "-m", "mwms_trainer.pid1", *sleeper(tmp_path / "ready")])
    try:
        wait_for_file(tmp_path / "ready")
        os.kill(pid1_of(proc), signal.SIGTERM)
        assert proc.wait(timeout=5) == 143
    finally:
        proc.kill()
        proc.wait()


def test_a_bare_pid1_ignores_sigterm(tmp_path):
    """Why pid1.py exists: the same child as PID 1 itself does not stop."""
    proc = as_pid1(sleeper(tmp_path / "ready"))
    try:
        wait_for_file(tmp_path / "ready")
        os.kill(pid1_of(proc), signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
    finally:
        proc.kill()
        proc.wait()


def test_a_child_that_ignores_sigterm_is_killed(tmp_path):
    proc = as_pid1([sys.executable, "-m", "mwms_trainer.pid1", *sleeper(tmp_path / "ready", True)])
    try:
        wait_for_file(tmp_path / "ready")
        os.kill(pid1_of(proc), signal.SIGTERM)
        assert proc.wait(timeout=pid1.KILL_AFTER_SECONDS + 5) == 143  # killed, but stopped for SIGTERM
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(("script", "code"), [("exit 0", 0), ("exit 75", 75), ("kill -USR1 $$", 138)])
def test_the_childs_exit_code_is_pid1s(script, code):
    proc = as_pid1([sys.executable, "-m", "mwms_trainer.pid1", "sh", "-c", script])
    assert proc.wait(timeout=30) == code


def test_a_missing_command_exits_127():
    proc = as_pid1([sys.executable, "-m", "mwms_trainer.pid1", "/no/such/command"])
    assert proc.wait(timeout=30) == 127


def test_a_child_that_asks_for_grace_is_not_killed_and_its_code_is_pid1s(tmp_path):
    """The save on SIGTERM: a child that asks for the grace period is left to end on its own (the pod's grace
    period bounds it), and exits with its own code."""
    ready, go, log = tmp_path / "ready", tmp_path / "go", tmp_path / "pid1.log"
    code = "\n".join(
        [
            "import pathlib, signal, time",
            "from mwms_trainer import pid1",
            "signal.signal(signal.SIGTERM, lambda *_: pid1.ask_for_grace())",
            f"pathlib.Path({str(ready)!r}).touch()",
            f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)",
            "raise SystemExit(75)",
        ]
    )
    with open(log, "wb") as out:
        proc = as_pid1([sys.executable, "-m", "mwms_trainer.pid1", sys.executable, "-c", code], stdout=out)
    try:
        wait_for_file(ready)
        os.kill(pid1_of(proc), signal.SIGTERM)
        deadline = time.monotonic() + pid1.KILL_AFTER_SECONDS + 30
        while pid1.SAVING_MESSAGE not in log.read_text():  # past the moment it would have been killed
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        go.touch()
        assert proc.wait(timeout=30) == 75
    finally:
        proc.kill()
        proc.wait()
