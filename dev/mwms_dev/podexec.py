"""Exec one pod container for the local node agent: `python -m mwms_dev.podexec PLAN.json`.

Test-side infrastructure (the container runtime's part of our kubelet stand-in, see nodeagent.py). The
agent writes a plan (argv, env, mounts, user, network namespace) as JSON; this program, running as root:
joins the pod's network namespace, unshares a private mount and UTS namespace, bind-mounts the per-pod
files (hosts, resolv.conf, ServiceAccount token, termination-message file, volumes) at their paths, sets
the hostname, drops to runAsUser/runAsGroup if asked, and replaces itself with the container's command.
No shell anywhere: argv goes straight to execvpe. Standard library only, so it starts fast.

If anything fails before the exec, the reason goes to the plan's `startErrorFile` (the agent reports it as
the container's termination message with reason StartError) and to stderr (the container log); exit 128.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import socket
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
STAGE_DIR = "/run/mwms-podexec-stage"  # mount points only; what is mounted there stays in the pod's namespace
START_ERROR_EXIT = 128

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, nstype), f"setns({path})")
    finally:
        os.close(fd)


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def mount(
    source: str | None, target: str, flags: int, fstype: str | None = None, data: str | None = None
) -> None:
    src = source.encode() if source is not None else None
    result = _libc.mount(
        src,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(result, f"mount {source} on {target}")


def blocked_dir(path: str) -> str | None:
    """The topmost directory from / down to `path` itself that others may not traverse (/root, mode 0700,
    or a checkout made by `mktemp -d`)."""
    parts = os.path.abspath(path).strip("/").split("/")
    for i in range(1, len(parts) + 1):
        directory = "/" + "/".join(parts[:i])
        mode = os.stat(directory).st_mode
        if stat.S_ISDIR(mode) and not mode & 0o001:
            return directory
    return None


def _kept_in(blocked: str, paths: list[str]) -> list[str]:
    """What must stay visible once `blocked` is covered: the paths below it, or all its entries if it is
    one of the paths itself; a path inside another kept one comes with it."""
    if blocked in paths:
        paths = [os.path.join(blocked, entry) for entry in os.listdir(blocked)]
    kept = sorted(set(paths))
    return [p for p in kept if not any(p.startswith(other + "/") for other in kept)]


def expose(paths: list[str]) -> None:
    """Make `paths` reachable for a non-root container although a directory on the way is closed to it (the
    venv's base interpreter under /root, a checkout in a mode-0700 directory): in this private mount
    namespace the closed directory becomes a tmpfs holding just what must stay visible, bind-mounted from the
    original. Repeated until nothing on the way is closed (a closed directory inside a closed one)."""
    covered: set[str] = set()
    while True:
        by_blocked: dict[str, list[str]] = {}
        for path in paths:
            blocked = blocked_dir(path)
            if blocked is not None:
                by_blocked.setdefault(blocked, []).append(path)
        if not by_blocked:
            return
        for blocked, inside in by_blocked.items():
            if blocked in covered:
                raise OSError(errno.EACCES, f"{blocked} stays closed to the container's user")
            covered.add(blocked)
            kept = _kept_in(blocked, inside)
            links = [(path, os.readlink(path)) for path in kept if os.path.islink(path)]
            staged = []
            for i, path in enumerate(p for p in kept if not os.path.islink(p)):
                is_file = not os.path.isdir(path)
                stage = f"{STAGE_DIR}/{'f' if is_file else 'd'}{i}"
                ensure_mount_point(stage, is_file)
                mount(path, stage, MS_BIND | MS_REC)
                staged.append((stage, path, is_file))
            mount("tmpfs", blocked, 0, fstype="tmpfs", data="mode=0755")
            for stage, path, is_file in staged:
                ensure_mount_point(path, is_file)
                mount(stage, path, MS_BIND | MS_REC)
                _check(_libc.umount2(stage.encode(), MNT_DETACH), f"umount {stage}")
            for path, target in links:  # recreated, not mounted: a bind mount would follow the link
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.symlink(target, path)


def ensure_mount_point(target: str, is_file: bool) -> None:
    if is_file:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    else:
        os.makedirs(target, exist_ok=True)


def prepare(plan: dict) -> None:
    """Everything between `fork` and `exec` that the kubelet and the runtime would do."""
    setns(plan["netns"], CLONE_NEWNET)
    unshare(CLONE_NEWNS | CLONE_NEWUTS)
    # Our mounts must not leak to the host (and the host's later mounts need not reach us).
    mount(None, "/", MS_REC | MS_PRIVATE)
    socket.sethostname(plan["hostname"])
    # Open every source before the first mount: a volume mounted over /tmp (or the tmpfs over /root below)
    # would otherwise hide sources that live under it, such as the agent's own state dir.
    sources = [os.open(m["source"], os.O_PATH | os.O_CLOEXEC) for m in plan["mounts"]]
    if plan.get("uid") not in (None, 0):
        expose(plan.get("exposePaths", []))
    # Opened after expose: what the container must see there, to put back if a volume covers it.
    runtime = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in plan.get("exposePaths", [])}
    for m, fd in zip(plan["mounts"], sources, strict=True):
        is_file = m.get("isFile", stat.S_ISREG(os.fstat(fd).st_mode))
        ensure_mount_point(m["target"], is_file)
        mount(f"/proc/self/fd/{fd}", m["target"], MS_BIND | MS_REC)
        os.close(fd)
        if m.get("readOnly"):
            mount(None, m["target"], MS_BIND | MS_REMOUNT | MS_RDONLY)
    # A volume over where the venv lives (an emptyDir at /tmp while the checkout is under /tmp) hides the
    # interpreter the container runs: put the runtime back on top, from the handles opened before.
    for path, fd in runtime.items():
        if not (os.path.exists(path) and os.path.samestat(os.stat(path), os.fstat(fd))):
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, MS_BIND | MS_REC)
        os.close(fd)
    os.makedirs(plan["cwd"], exist_ok=True)
    os.chdir(plan["cwd"])
    uid, gid = plan.get("uid"), plan.get("gid")
    if uid is not None or gid is not None:
        os.setgroups([g for g in [gid, *plan.get("groups", [])] if g is not None])
        if gid is not None:
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mwms_dev.podexec PLAN.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        plan = json.load(f)
    # Opened now, while no mount can hide it.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    plan["startErrorFd"] = os.open(plan["startErrorFile"], flags)
    try:
        prepare(plan)
    except OSError as exc:
        return start_error(plan, f"cannot set up the container: {exc}")
    command = plan["argv"][0]
    try:
        os.execvpe(command, plan["argv"], plan["env"])
    except FileNotFoundError:
        where = "" if "/" in command else f" in PATH {plan['env'].get('PATH', '')}"
        return start_error(plan, f"cannot start container: executable {command!r} not found{where}")
    except OSError as exc:
        return start_error(plan, f"cannot start container: exec {command!r}: {exc.strerror}")
    return START_ERROR_EXIT  # not reached: execvpe does not return


def start_error(plan: dict, message: str) -> int:
    print(message, file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):
        os.write(plan["startErrorFd"], message.encode())
    return START_ERROR_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
