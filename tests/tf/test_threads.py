"""The settings' thread count reaches TensorFlow's pools (a fresh process: pools are fixed once it starts)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
from mwms_trainer import tfenv, trainer_config
settings = trainer_config.load({"MLFLOW_TRACKING_URI": "http://127.0.0.1:1", "MWMS_THREADS": "1"})
tfenv.size_thread_pools(settings.threads)
tf = tfenv.tensorflow()
tf.constant(1.0) + 1.0  # the runtime starts with the pools it was given
threading = tf.config.threading
print(threading.get_intra_op_parallelism_threads(), threading.get_inter_op_parallelism_threads())
"""


def test_mwms_threads_sizes_both_pools():
    cmd = [sys.executable, "-c", CODE]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split()[-2:] == ["1", "1"]
