"""Startup rendezvous over real sockets; import rules (no TensorFlow or mlflow where unused)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from mwms_contract import names
from mwms_contract.names import RENDEZVOUS_FILE, RENDEZVOUS_PROBE_COMMAND
from mwms_trainer import rendezvous
from mwms_trainer.cluster_spec import Cluster
from mwms_trainer.errors import RetryableError
from mwms_trainer.local import free_ports


def test_rendezvous_waits_for_listening_peers():
    ports = free_ports(2)
    hosts = tuple(f"127.0.0.1:{p}" for p in ports)
    me = Cluster(hosts=hosts, rank=0)
    deadline = time.monotonic() + 10
    with rendezvous.listening(Cluster(hosts=hosts, rank=1).own_address, deadline):
        rendezvous.wait_for_peers(me, deadline)  # returns: worker 1 listens


def test_rendezvous_names_the_missing_peer_at_the_deadline():
    ports = free_ports(3)
    hosts = tuple(f"127.0.0.1:{p}" for p in ports[:2]) + ("no-such-host.invalid:2222",)
    with pytest.raises(RetryableError) as err:
        rendezvous.wait_for_peers(Cluster(hosts=hosts, rank=0), time.monotonic() + 1)
    text = str(err.value)
    assert "worker 1 (127.0.0.1:" in text and "does not accept connections" in text
    assert "worker 2 (no-such-host.invalid:2222): name does not resolve" in text
    assert err.value.exit_code == 75


def test_without_a_deadline_the_rendezvous_waits_for_a_late_peer_and_says_whom_it_waits_for(
    monkeypatch, caplog
):
    """In a pod (MWMS_PEER_WAIT_SECONDS=0) a peer may come long after the startup timeout: its image pulls."""
    monkeypatch.setattr(rendezvous, "STILL_WAITING_LOG_SECONDS", 1)
    ports = free_ports(2)
    hosts = tuple(f"127.0.0.1:{p}" for p in ports)
    late_peer = socket.socket()
    late_peer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    late_peer.bind(("127.0.0.1", ports[1]))
    listen_later = threading.Timer(3, late_peer.listen, args=(8,))
    try:
        with caplog.at_level("INFO", logger="mwms_trainer"):
            listen_later.start()
            rendezvous.wait_for_peers(Cluster(hosts=hosts, rank=0), None)  # returns once worker 1 listens
    finally:
        listen_later.cancel()
        late_peer.close()
    assert "still waiting for 1 peer(s): worker 1 (127.0.0.1:" in caplog.text


def _readiness(path) -> subprocess.CompletedProcess[str]:
    """The worker pods' real readiness probe, reading `path` instead of the volume's file."""
    command = [part.replace(RENDEZVOUS_FILE, str(path)) for part in RENDEZVOUS_PROBE_COMMAND]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_the_rendezvous_state_says_why_a_worker_has_not_joined_until_it_has(monkeypatch, tmp_path):
    state = tmp_path / "state"
    monkeypatch.setattr(rendezvous, "RENDEZVOUS_FILE", str(state))
    before = _readiness(state)
    assert before.returncode == 1 and before.stdout == "the trainer has not begun its rendezvous yet\n"
    hosts = (f"127.0.0.1:{free_ports(1)[0]}", "no-such-host.invalid:2222")
    with pytest.raises(RetryableError):
        rendezvous.wait_for_peers(Cluster(hosts=hosts, rank=0), time.monotonic() + 1)
    waiting = _readiness(state)
    assert waiting.returncode == 1, waiting
    assert waiting.stdout.startswith("waiting for peers: worker 1 (no-such-host.invalid:2222): name does not")
    assert waiting.stderr == "" and waiting.stdout.count("\n") == 1
    rendezvous.mark_joined()
    rendezvous.note_rendezvous("every peer answers: registering with MultiWorkerMirroredStrategy()")
    joined = _readiness(state)
    assert (joined.returncode, joined.stdout) == (0, "joined\n"), "once joined, a worker stays joined"


def test_without_the_operators_volume_no_rendezvous_state_is_written(monkeypatch, tmp_path):
    monkeypatch.setattr(rendezvous, "RENDEZVOUS_FILE", str(tmp_path / "absent" / "state"))
    rendezvous.mark_joined()
    assert not (tmp_path / "absent").exists()


def test_listener_leaves_the_port_free_for_grpc():
    port = free_ports(1)[0]
    with rendezvous.listening(f"127.0.0.1:{port}", time.monotonic() + 5):
        assert rendezvous._reachable(f"127.0.0.1:{port}") is None
    with socket.socket() as s:  # what the strategy's gRPC server does next
        s.bind(("127.0.0.1", port))


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return set(out.stdout.split())


def test_importing_the_package_does_not_import_tensorflow():
    mods = _modules_after(
        "import mwms_trainer, mwms_trainer.trainer_config, mwms_trainer.cluster_spec, mwms_trainer.local"
    )
    assert "tensorflow" not in mods and "mlflow" not in mods


def test_the_migration_api_imports_without_tensorflow():
    mods = _modules_after(
        "from mwms_trainer import MirroredStrategyRunner, is_chief, log_model, mlflow_callback"
    )
    assert "tensorflow" not in mods and "mlflow" not in mods


def test_null_tracker_never_imports_mlflow():
    mods = _modules_after(
        "from mwms_trainer import mlflow_run\nmlflow_run.NullTracker().log_epoch(0, {'loss': 1.0})"
    )
    assert "mlflow" not in mods


def test_the_trainers_runner_sends_cluster_users_to_the_client():
    """The cluster path is the client's (`mwms`), which this package never imports."""
    from mwms_trainer import MirroredStrategyRunner

    with pytest.raises(TypeError, match="from mwms import Cluster, MirroredStrategyRunner"):
        MirroredStrategyRunner(num_slots=2, cluster=object())


def test_the_runs_params_read_package_versions_without_importing_the_packages():
    """Importing scikit-learn, TensorFlow and tf_keras for their __version__ cost seconds before the run."""
    code = (
        "import json, sys, numpy as np\n"
        "from mwms_trainer import train, trainer_config\n"
        "from mwms_trainer.input import exact\n"
        "environ = {'MLFLOW_TRACKING_URI': 'http://127.0.0.1:1', 'MWMS_TRAINER_CONFIG': '{}'}\n"
        "settings = trainer_config.load(environ)\n"
        "rows = np.zeros((64, 2), dtype=np.float32)\n"
        "split = exact.Split(rows, np.zeros(64), rows, np.zeros(64), ('a', 'b'), np.zeros(2), np.ones(2))\n"
        "params = train.params_of(settings, exact.ExactInput(settings.trainer, split))\n"
        "imported = [m for m in ('sklearn', 'tensorflow', 'tf_keras') if m in sys.modules]\n"
        "print(json.dumps({'params': params, 'imported': imported}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["imported"] == []
    params = result["params"]
    assert (params["sklearnVersion"], params["tensorflowVersion"], params["tfKerasVersion"]) == (
        version("scikit-learn"),
        version("tensorflow"),
        version("tf-keras"),
    )


def test_a_tensorflow_that_fails_to_import_in_the_background_ends_the_worker_with_its_error(tmp_path):
    """The trainer imports TensorFlow in a thread from its start; a failed import surfaces on the main thread
    when TensorFlow is first needed, as the same permanent failure (exit 1) naming the error."""
    broken = Path(__file__).resolve().parents[2] / "data" / "trainer"
    termination = tmp_path / "termination"
    env = {
        **os.environ,
        # mlflow poisoned too: the chief's run opens alongside, and fails at once instead of retrying
        "PYTHONPATH": f"{broken / 'broken-tensorflow'}:{broken / 'poison'}",
        names.ENV_TRACKING_URI: "http://127.0.0.1:1",
        names.ENV_TERMINATION_LOG: str(termination),
        names.ENV_TRAINER_CONFIG: '{"epochs": 1}',
    }
    env.pop(names.ENV_TF_CONFIG, None)
    out = subprocess.run(
        [sys.executable, "-m", "mwms_trainer"], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == names.EXIT_FAILURE, out.stdout + out.stderr
    assert termination.read_text() == (
        "failed: ImportError: libtensorflow_framework.so.2: cannot open shared object file "
        "(a test's broken TensorFlow)"
    )


def test_a_failure_meanwhile_ends_a_rendezvous_that_has_no_deadline():
    """In a pod the chief waits for its peers without a limit while its MLflow run opens: an MLflow failure
    ends the wait at once (exit 75 with MLflow's message), as it did when the run opened before the wait."""
    hosts = (f"127.0.0.1:{free_ports(1)[0]}", "no-such-host.invalid:2222")
    rounds: list[int] = []

    def mlflow_failed() -> None:
        rounds.append(1)
        if len(rounds) == 2:
            raise RetryableError(
                "MLflow at http://mlflow:5000 is unavailable (experiment lookup failed 5 times)"
            )

    with pytest.raises(RetryableError, match="MLflow at http://mlflow:5000 is unavailable"):
        rendezvous.wait_for_peers(Cluster(hosts=hosts, rank=0), None, meanwhile=mlflow_failed)
    assert len(rounds) == 2
