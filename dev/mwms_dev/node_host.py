"""What a real node changes on the host, and how it is put back: the pods' cgroup root, the kernel tunables
the kubelet sets, containerd's shims and their sockets, the mounts under the node's directory, our nftables
guard and kube-proxy's tables, and the machine-wide kube-proxy lock. clean_dead_node puts back all of it for
a node whose processes are gone."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from mwms_dev import network
from mwms_dev.node_parts import NodeError
from mwms_dev.procs import pid_alive

CGROUP_FS = Path("/sys/fs/cgroup")
PODS_CPU_SHARES = 16384  # as much CPU weight as 16 busy host processes (see make_cgroup_root)
# The kubelet sets these once at start (it has no "leave them" mode, only "set" or "refuse to start"): we put
# the host's values back as soon as the node is Ready, and again at cleanup, so the machine keeps its own.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# containerd 1.6 puts its shims' sockets here whatever its config says; a SIGKILLed shim leaves its file.
SHIM_SOCKET_DIR = Path("/run/containerd/s")
# kube-proxy's nftables tables have fixed names (`ip kube-proxy`, `ip6 kube-proxy`): one real node with
# kube-proxy per machine at a time.
KUBE_PROXY_LOCK = Path("/run/mwms/kube-proxy.lock")
KUBE_PROXY_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))


def own_cgroup_parent() -> str:
    """The memory cgroup this process is in: pods go below it, so the machine's accounting still sees them."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path.rstrip("/")
    return ""


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (cpu, memory, pids, ..., name=systemd, and the hybrid mode's unified
    one, where runc mirrors the pods' cgroups)."""
    if not CGROUP_FS.is_dir():
        return []
    return [p for p in sorted(CGROUP_FS.iterdir()) if p.is_dir() and (p / "cgroup.procs").exists()]


def make_cgroup_root(cgroup_root: str) -> list[str]:
    """Create `cgroup_root` in every hierarchy (kubelet refuses one that is missing); returns the cgroups
    made here, for remove_cgroup_root. cpuset needs cpus/mems copied down. In cgroup v1's cpu controller
    each process of a parent group weighs as much as a whole child group: on a machine busy with host
    processes the pods would get a sliver of the CPU, so the cpu groups made here weigh PODS_CPU_SHARES."""
    created = []
    for hierarchy in cgroup_hierarchies():
        current = hierarchy
        for part in Path(cgroup_root.lstrip("/")).parts:
            parent, current = current, current / part
            if not current.exists():
                current.mkdir()
                created.append(str(current))
                if hierarchy.name == "cpu":
                    (current / "cpu.shares").write_text(f"{PODS_CPU_SHARES}\n")
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (current / knob).read_text().strip():
                        (current / knob).write_text((parent / knob).read_text())
    return created


def remove_cgroup_root(cgroup_root: str, created: list[str]) -> None:
    """kill_cgroup_tree, then the ancestors make_cgroup_root made (if they hold nothing else now)."""
    kill_cgroup_tree(cgroup_root)
    for directory in sorted(created, key=len, reverse=True):
        with contextlib.suppress(OSError):
            Path(directory).rmdir()


def cgroup_dirs(top: Path) -> list[Path]:
    """`top` and every cgroup below it, deepest first; cgroups vanishing meanwhile are skipped."""
    return [Path(directory) for directory, _, _ in os.walk(top, topdown=False)]


def kill_cgroup_tree(cgroup_root: str, timeout: float = 20.0) -> None:
    """SIGKILL every process below `cgroup_root` (the pods' containers), then remove its cgroups."""
    pids_root = CGROUP_FS / "pids" / cgroup_root.lstrip("/")
    deadline = time.monotonic() + timeout
    while pids_root.is_dir():
        pids = [int(pid) for d in cgroup_dirs(pids_root) for pid in _read(d / "cgroup.procs").split()]
        if not pids or time.monotonic() > deadline:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for hierarchy in cgroup_hierarchies():
        for directory in cgroup_dirs(hierarchy / cgroup_root.lstrip("/")):
            with contextlib.suppress(OSError):
                directory.rmdir()


def save_kernel_tunables(path: Path) -> None:
    values = {name: _read(Path("/proc/sys") / name).strip() for name in KERNEL_TUNABLES}
    path.write_text(json.dumps({k: v for k, v in values.items() if v}))


def restore_kernel_tunables(path: Path) -> None:
    if not path.is_file():
        return
    for name, value in json.loads(path.read_text()).items():
        target = Path("/proc/sys") / name
        if _read(target).strip() != value:
            with contextlib.suppress(OSError):
                target.write_text(value + "\n")


def kill_shims(containerd_socket: Path) -> None:
    """SIGKILL the containerd shims that serve `containerd_socket` (they outlive containerd by design)."""
    wanted = str(containerd_socket).encode()
    killed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and wanted in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    deadline = time.monotonic() + 5
    while any(pid_alive(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.05)


def remove_dead_shim_sockets() -> None:
    """Unlink shim socket files no live process is bound to (ours, after a kill; any crashed containerd's)."""
    if not SHIM_SOCKET_DIR.is_dir():
        return
    rows = [line.split() for line in _read(Path("/proc/net/unix")).splitlines()[1:]]
    bound = {row[-1] for row in rows if len(row) > 7}
    for socket_file in SHIM_SOCKET_DIR.iterdir():
        if str(socket_file) not in bound:
            with contextlib.suppress(OSError):
                socket_file.unlink()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def unmount_below(directory: Path) -> None:
    """Unmount everything mounted at or below `directory`, deepest first (overlays, shm, netns, volumes)."""
    prefix = str(directory.resolve())
    for _ in range(3):  # a mount can hide another at the same point
        mounts = []
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1].replace("\\040", " ")
            if target == prefix or target.startswith(prefix + "/"):
                mounts.append(target)
        if not mounts:
            return
        for target in sorted(set(mounts), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, timeout=30)


def _nft(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", *args], input=stdin, capture_output=True, text=True, timeout=30)


def guard_table(net: network.PodNetwork) -> str:
    return f"mwms_{net.bridge}"


def add_pod_guard(net: network.PodNetwork) -> None:
    """Pods may reach the host and each other, nothing else: routed packets from the bridge to any other
    interface are dropped. Forwarding is turned on for this bridge alone (Services are DNATed by the host,
    so a pod's packet to a Service IP is routed back onto the bridge)."""
    table = guard_table(net)
    _nft("delete", "table", "inet", table)
    rules = (
        f"table inet {table} {{\n"
        "  chain forward {\n"
        "    type filter hook forward priority -10; policy accept;\n"
        f'    iifname "{net.bridge}" oifname != "{net.bridge}" drop\n'
        "  }\n"
        "}\n"
    )
    result = _nft("-f", "-", stdin=rules)
    if result.returncode != 0:
        raise NodeError(f"nft: cannot add table inet {table}: {result.stderr.strip()}")
    Path(f"/proc/sys/net/ipv4/conf/{net.bridge}/forwarding").write_text("1\n")


def remove_nft_tables(net: network.PodNetwork, kube_proxy: bool) -> None:
    _nft("delete", "table", "inet", guard_table(net))
    if kube_proxy:
        for family, name in KUBE_PROXY_TABLES:
            _nft("delete", "table", family, name)


def take_kube_proxy_lock(owner: str) -> int:
    """The machine-wide right to run kube-proxy (its nftables tables have fixed names); NodeError if held."""
    KUBE_PROXY_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(KUBE_PROXY_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode().strip()
        os.close(fd)
        raise NodeError(
            f"another real node runs kube-proxy on this machine ({holder or '?'}); kube-proxy's nftables "
            "tables have fixed names, so only one at a time"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, owner.encode(), 0)
    return fd


def clean_dead_node(net: network.PodNetwork, node_dir: Path) -> None:
    """What a node whose processes are gone (stopped or crashed) leaves on the host: its containers,
    mounts, cgroups and nftables tables. kube-proxy's tables go only if no live node holds them."""
    cgroup_file = node_dir / "cgroups.json"
    if cgroup_file.is_file():
        cgroups = json.loads(cgroup_file.read_text())
        remove_cgroup_root(cgroups["root"], cgroups["created"])
    kill_shims(node_dir / "containerd.sock")
    unmount_below(node_dir)
    restore_kernel_tunables(node_dir / "kernel-tunables.json")
    remove_dead_shim_sockets()
    try:
        fd = take_kube_proxy_lock(f"cleanup pid {os.getpid()}")
    except NodeError:
        remove_nft_tables(net, kube_proxy=False)
    else:
        remove_nft_tables(net, kube_proxy=True)
        os.close(fd)
