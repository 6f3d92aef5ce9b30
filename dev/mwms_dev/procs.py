"""Start processes so that every one of them, and everything they start, can be stopped for sure.

Each process gets its own session (process group), so a signal reaches its children too. Where the
cgroup-v1 `pids` hierarchy is writable (root on these machines), each process is also put into a cgroup
named after the cluster: what a process starts in a session of its own is still found there, including
what a run that crashed before it could clean up left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup/pids/mwms")


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def live_group_members(pgid: int) -> list[int]:
    """Processes (not zombies) in process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _ppid, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def stop_process(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM `proc`, wait up to `grace` seconds for it to exit, then SIGKILL it; returns once it is reaped.
    The process alone, not its group: for processes started without a session of their own."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class ProcessCgroup:
    """A cgroup-v1 `pids` group used only to find processes; a no-op where cgroups are not writable."""

    def __init__(self, name: str):
        self.path = CGROUP_ROOT / name
        self.enabled = os.access(CGROUP_ROOT.parent, os.W_OK)

    def add(self, pid: int) -> None:
        if self.enabled:
            with contextlib.suppress(OSError):  # the process may already have exited
                self.path.mkdir(parents=True, exist_ok=True)
                (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        if not self.enabled:
            return []
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def kill_all(self, timeout: float = 10.0) -> None:
        """SIGKILL everything in the group until it is empty, then remove the group."""
        if not self.enabled:
            return
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            self.path.rmdir()


class Supervisor:
    """The processes of one cluster, stopped in reverse start order."""

    def __init__(self, cgroup_name: str):
        self.cgroup = ProcessCgroup(cgroup_name)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        if name in self.processes and self.processes[name].poll() is None:
            raise RuntimeError(f"{name} is already running (pid {self.processes[name].pid})")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        # A fresh process needs far longer than this to fork anything, so nothing escapes the group.
        self.cgroup.add(proc.pid)
        self.processes[name] = proc
        return proc

    def stop(self, name: str, timeout: float = 10.0, sig: signal.Signals = signal.SIGTERM) -> None:
        """Signal the process group, wait up to `timeout`, then SIGKILL the group."""
        proc = self.processes.get(name)
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
        # Children in the group may outlive the leader; a signalled process takes a moment to die.
        _signal_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        deadline = time.monotonic() + 5
        while live_group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop_all(self, timeout: float = 10.0) -> None:
        for name in reversed(list(self.processes)):
            self.stop(name, timeout)
        self.cgroup.kill_all()

    def pids(self) -> list[int]:
        """Every pid started here (leaders) plus whatever the cgroup still holds."""
        return sorted({p.pid for p in self.processes.values()} | set(self.cgroup.pids()))
