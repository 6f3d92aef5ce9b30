"""Every peer-loss path exits 75: each TensorFlow error type injected where the trainer meets it.

The strategy constructor, the built-in fit and a runner's train_fn; a genuine bug (InvalidArgumentError)
stays permanent. And a runner's own MultiWorkerMirroredStrategy() gets the built-in trainer's backstop.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from mwms_contract import names
from mwms_trainer import mlflow_run, rendezvous, strategy_runner, train, trainer_config
from mwms_trainer.cluster_spec import Cluster
from mwms_trainer.errors import RetryableError
from mwms_trainer.local import free_ports
from mwms_trainer.tfenv import keras, tensorflow

CASES = [*((name, True) for name in rendezvous.PEER_LOSS_ERRORS), ("InvalidArgumentError", False)]


def _raiser(name):
    error = getattr(tensorflow().errors, name)(None, None, "injected\nsecond line")

    def fail(*args, **kwargs):
        raise error

    return fail


def _in_constructor(monkeypatch, fail):
    monkeypatch.setattr(tensorflow().distribute, "MultiWorkerMirroredStrategy", fail)
    rendezvous.create_strategy(Cluster(hosts=(), rank=0), time.monotonic() + 60, lambda _: None, None)


def _in_fit(monkeypatch, fail):
    tf = tensorflow()
    monkeypatch.setattr(train, "open_tracker", lambda *_: mlflow_run.NullTracker())
    monkeypatch.setattr(rendezvous, "create_strategy", lambda *_: tf.distribute.get_strategy())
    monkeypatch.setattr(keras().Model, "fit", fail)
    environ = {names.ENV_TRACKING_URI: "http://127.0.0.1:1", "MWMS_TRAINER_CONFIG": "{}"}
    settings = trainer_config.load(environ)
    train.run(settings)


def _in_train_fn(monkeypatch, fail):
    monkeypatch.delenv(names.ENV_TRACKING_URI, raising=False)
    strategy_runner.run_here(fail, {}, use_custom_strategy=True)


@pytest.mark.parametrize("where", [_in_constructor, _in_fit, _in_train_fn], ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize(("name", "retryable"), CASES, ids=[name for name, _ in CASES])
def test_peer_loss_errors_are_retryable_everywhere(monkeypatch, tmp_path, where, name, retryable):
    monkeypatch.setenv(names.ENV_TERMINATION_LOG, str(tmp_path / "termination"))
    monkeypatch.delenv(names.ENV_TF_CONFIG, raising=False)
    error_type = getattr(tensorflow().errors, name)
    with pytest.raises(RetryableError if retryable else error_type) as err:
        where(monkeypatch, _raiser(name))
    if retryable:
        assert err.value.exit_code == names.EXIT_RETRYABLE
        assert str(err.value).startswith("lost a peer ")
        assert str(err.value).endswith(f"{name}: injected")


# Every way a user's code makes the strategy; the last binds the name when the script is imported, before the
# runner is called.
CONSTRUCTORS = {
    "v2": ("import tensorflow as tf", "tf.distribute.MultiWorkerMirroredStrategy()"),
    "experimental": ("import tensorflow as tf", "tf.distribute.experimental.MultiWorkerMirroredStrategy()"),
    "bound-at-import": (
        "import tensorflow as tf; MWMS = tf.distribute.MultiWorkerMirroredStrategy",
        "MWMS()",
    ),
}


@pytest.mark.parametrize("constructor", CONSTRUCTORS)
def test_a_runners_own_strategy_gets_the_startup_backstop(tmp_path, constructor):
    """A peer that answered the rendezvous but never registers: SIGALRM at the deadline, not an hour later."""
    ports = free_ports(2)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    script = tmp_path / "train.py"
    imports, strategy = CONSTRUCTORS[constructor]
    script.write_text(
        textwrap.dedent(
            f"""
            {imports}
            from mwms_trainer import MirroredStrategyRunner

            def train():
                return {strategy}.num_replicas_in_sync

            MirroredStrategyRunner(num_slots=2, use_custom_strategy=True).run(train)
            """
        )
    )
    env = {
        **os.environ,
        names.ENV_TF_CONFIG: json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": 0}}
        ),
        names.ENV_STARTUP_TIMEOUT: "15",
        names.ENV_TERMINATION_LOG: str(tmp_path / "termination"),
    }
    env.pop(names.ENV_TRACKING_URI, None)
    with socket.socket() as fake_peer:
        fake_peer.bind(("127.0.0.1", ports[1]))
        fake_peer.listen(8)
        proc = subprocess.Popen([sys.executable, str(script)], env=env)
        try:
            code = proc.wait(timeout=600)
        finally:
            proc.kill()
            proc.wait()
    assert code == -signal.SIGALRM
    assert (tmp_path / "termination").read_text() == rendezvous.REGISTRATION_BACKSTOP_NOTE


def _builtin_strategy() -> None:
    rendezvous.create_strategy(Cluster(hosts=(), rank=0), time.monotonic() + 60, lambda _: None, None)


def _runners_own_strategy() -> None:
    strategy_runner.run_here(
        lambda: tensorflow().distribute.MultiWorkerMirroredStrategy(), {}, use_custom_strategy=True
    )


def _runner_without_a_strategy() -> None:
    strategy_runner.run_here(lambda: None, {}, use_custom_strategy=True)


@pytest.mark.parametrize(
    "start",
    [_builtin_strategy, _runners_own_strategy, _runner_without_a_strategy],
    ids=lambda f: f.__name__[1:],
)
def test_a_worker_that_met_its_peers_has_joined_whoever_makes_the_strategy(monkeypatch, tmp_path, start):
    """Its pod's readiness probe passes from then on: the built-in trainer, a runner's train_fn that makes its
    own strategy, or one that makes none."""
    state = tmp_path / "state"
    monkeypatch.setattr(rendezvous, "RENDEZVOUS_FILE", str(state))
    monkeypatch.setenv(names.ENV_TERMINATION_LOG, str(tmp_path / "termination"))
    monkeypatch.delenv(names.ENV_TF_CONFIG, raising=False)
    monkeypatch.delenv(names.ENV_TRACKING_URI, raising=False)
    start()
    assert state.read_text() == "joined\n"
