"""Operator replicas beside ScaleEnv's own, kept as a Deployment keeps its pods: a replica that exits (killed,
or a leader that lost its Lease) is started again after `restart_delay`, on the same metrics port, as its
container would be restarted. Slot 0 is ScaleEnv's operator (its replacement becomes `env.operator`, which
ScaleEnv stops at the end); the others are stopped by `stop()`."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mwms_dev.cluster import free_port
from mwms_dev.procs import stop_process


@dataclass
class Slot:
    process: subprocess.Popen[bytes]
    port: int
    log: Path


class Replicas:
    def __init__(self, env: Any, count: int, restart_delay: float = 1.0) -> None:
        self.env, self.restart_delay = env, restart_delay
        self.slots = [Slot(env.operator, env.metrics_port, env.state_dir / "operator.log")]
        for i in range(1, count):
            log = env.state_dir / f"operator-{i + 1}.log"
            port = free_port()
            self.slots.append(Slot(self._spawn(port, log), port, log))
        self.exits: list[tuple[float, int, int | None]] = []  # (monotonic, slot, exit code)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()

    def _spawn(self, port: int, log: Path) -> subprocess.Popen[bytes]:
        """As ScaleEnv starts its operator, on `port`."""
        with log.open("ab") as out:
            return self.env.spawn_operator(port, out)

    def _keep(self) -> None:
        while not self._stop.wait(0.2):
            for index, slot in enumerate(self.slots):
                if slot.process.poll() is None:
                    continue
                self.exits.append((time.monotonic(), index, slot.process.returncode))
                if self._stop.wait(self.restart_delay):
                    return
                slot.process = self._spawn(slot.port, slot.log)
                if index == 0:
                    self.env.operator = slot.process

    def by_pid(self, pid: int) -> Slot | None:
        return next((slot for slot in self.slots if slot.process.pid == pid), None)

    def kill(self, slot: Slot) -> None:
        """SIGKILL: no release of the Lease, as a node that dies or an OOM kill."""
        slot.process.send_signal(signal.SIGKILL)
        slot.process.wait()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for slot in self.slots[1:]:
            stop_process(slot.process, 15)
