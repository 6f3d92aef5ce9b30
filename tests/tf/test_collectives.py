"""One cross-worker all-reduce per training step (the gradients'), where Keras' default step did eight.

The default step also all-reduced a "still has data" flag (a finite dataset), each metric's state (4) and the
returned logs (2). Counted in the train function fit traces on each worker of a real 2-worker group; the
1/2/4-worker equivalence test checks that the math did not change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tf_support import HANG_SECONDS

from mwms_trainer.local import free_ports

PROBE = Path(__file__).with_name("collectives_probe.py")


def test_one_all_reduce_per_step(tmp_path):
    addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
    procs = []
    for rank in range(2):
        tf_config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": rank}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config)}
        log = open(tmp_path / f"worker-{rank}.log", "w+b")  # noqa: SIM115 (closed below)
        procs.append(
            (
                subprocess.Popen([sys.executable, str(PROBE)], env=env, stdout=log, stderr=subprocess.STDOUT),
                log,
            )
        )
    reports = []
    try:
        for proc, log in procs:
            assert proc.wait(timeout=HANG_SECONDS) == 0, (tmp_path / "worker-0.log").read_text()[-3000:]
            log.seek(0)
            reports.append(json.loads(log.read().decode().strip().splitlines()[-1]))
    finally:
        for proc, log in procs:
            proc.kill()
            proc.wait()
            log.close()
    for report in reports:
        assert report["steps"] > 1  # the traced function loops over steps: its body is one step
        assert report["collectiveOps"], report
        for ops in report["collectiveOps"]:
            assert ops == ["CollectiveReduceV2"], report
    assert reports[0]["loss"] == reports[1]["loss"]
