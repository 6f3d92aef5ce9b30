"""Run a command as PID 1 of a new PID namespace, as a container runtime does (needs root: unshare --pid).

The runtime signals a container's PID 1 from outside its namespace; so does `signal_pid1` here, through the
host pid of the namespace's init.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

AVAILABLE = os.geteuid() == 0 and shutil.which("unshare") is not None
WHY_NOT = "a new PID namespace (unshare --pid) needs root and util-linux's unshare"


def start_as_pid1(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, stdout: IO[Any] | int | None = None
) -> subprocess.Popen[bytes]:
    """`cmd` as PID 1 of a new PID namespace; --kill-child ends it when unshare dies (a failed test)."""
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *cmd],
        env=None if env is None else dict(env),
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout is not None else None,
    )


def pid1_of(proc: subprocess.Popen[bytes]) -> int:
    """The host pid of the namespace's PID 1: unshare's only child."""
    return int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])


def wait_for_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
