"""SIGTERM to exit of a trainer worker that is PID 1 of its own PID namespace (as in a container), by phase.

Phases: waiting for a peer that never comes (rendezvous), blocked in MultiWorkerMirroredStrategy() (a fake
peer accepts TCP but never registers), mid-fit. Needs root (unshare --pid). Writes
bench/results/trainer_sigterm.json. Usage: .venv/bin/python bench/trainer_sigterm_bench.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig
from mwms_trainer import local

RESULTS = Path(__file__).resolve().parent / "results" / "trainer_sigterm.json"
PHASES = {
    "waiting_for_peer": (2, {"epochs": 1}, "waiting for 1 peer(s)"),
    "in_strategy_constructor": (2, {"epochs": 1}, "registering with MultiWorkerMirroredStrategy()"),
    "mid_fit": (1, {"dataset": "synthetic", "syntheticSamples": 50000, "epochs": 200}, "epoch 2/200"),
}


def measure(phase: str, root: Path) -> dict[str, object]:
    replicas, trainer, ready = PHASES[phase]
    name = f"sigterm-{phase.replace('_', '-')}"
    spec = parse_trainjob(
        {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "trainer": trainer, "runPolicy": {"startupTimeoutSeconds": 600}},
        },
        OperatorConfig().spec_defaults(),
    )
    uri = local.prepare_sqlite_store(root, name)
    job_dir = root / f"{name}-{uuid.uuid4().hex[:6]}"
    envs = local.worker_envs(
        spec, job_name=name, namespace="bench", uid=str(uuid.uuid4()), tracking_uri=uri, job_dir=job_dir
    )
    job_dir.mkdir(parents=True, exist_ok=True)
    log_path = job_dir / "worker-0.log"
    fake_peer = None
    if phase == "in_strategy_constructor":
        peer = json.loads(envs[0]["TF_CONFIG"])["cluster"]["worker"][1]
        fake_peer = socket.socket()
        fake_peer.bind(("127.0.0.1", int(peer.rsplit(":", 1)[1])))
        fake_peer.listen(8)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-m", "mwms_trainer"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=envs[0], stdout=log, stderr=subprocess.STDOUT)
    try:
        while ready not in log_path.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"{phase}: exited {proc.returncode}; see {log_path}")
            time.sleep(0.05)
        time.sleep(1)
        pid1 = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        sent = time.monotonic()
        os.kill(pid1, signal.SIGTERM)
        code = proc.wait(timeout=60)
        seconds = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
        if fake_peer is not None:
            fake_peer.close()
    killed = "sent SIGKILL" in log_path.read_text(errors="replace")
    return {"phase": phase, "exit_code": code, "seconds": round(seconds, 3), "escalated_to_sigkill": killed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="mwms-sigterm-bench-") as tmp:
        for _ in range(args.repeat):
            for phase in PHASES:
                result = measure(phase, Path(tmp))
                print(json.dumps(result), flush=True)
                results.append(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "what": "SIGTERM from outside its PID namespace to exit of python -m mwms_trainer as PID 1",
                "machine": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
