"""A drop-in for spark-tensorflow-distributor's MirroredStrategyRunner (in a worker pod, or as local
processes), plus `is_chief`, `log_model` and `mlflow_callback`, which write to the chief's one MLflow run.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from mwms_contract import names, termination
from mwms_contract.tf_config import tf_config
from mwms_trainer import cluster_spec, local, mlflow_run, rendezvous, train
from mwms_trainer import result as job_result
from mwms_trainer.cpus import thread_count
from mwms_trainer.errors import TrainerError
from mwms_trainer.model import plain_copy
from mwms_trainer.tfenv import size_thread_pools, tensorflow
from mwms_trainer.trainer_config import peer_wait_seconds

_state: dict[str, Any] = {}  # this worker's tracker while run() is inside train_fn


def _cluster() -> cluster_spec.Cluster:
    return cluster_spec.from_tf_config(os.environ.get(names.ENV_TF_CONFIG))


def is_chief() -> bool:
    """True on worker 0 (or outside any cluster): the one process that should write to MLflow."""
    return _cluster().is_chief


def log_model(model: Any, name: str = "model", **kwargs: Any) -> Any:
    """Log `model` in MLflow's TensorFlow flavour from the chief only; None on other workers.

    Collective-safe: the chief logs a plain copy built from the weights (model.plain_copy), so no worker has
    to take part and nothing blocks. Call it on every worker anyway: the code stays the same everywhere.
    Inside run_here MLflow's transient failures are retried and a restarted group reuses the READY model of
    that name (mlflow_run.MlflowTracker.models_logged_once; plain mlflow.<flavor>.log_model calls get it too).
    """
    if not is_chief():
        return None
    import mlflow  # on the chief only; the other workers never import it

    kwargs.setdefault("pip_requirements", mlflow_run.serving_requirements())
    info = mlflow.tensorflow.log_model(plain_copy(model), name=name, **kwargs)
    _state["model_uri"] = info.model_uri  # for the chief's termination message
    return info


def mlflow_callback() -> Any:
    """A Keras callback: per-epoch progress in every worker's log, per-epoch metrics in the chief's run."""
    tracker = _state.get("tracker") or mlflow_run.NullTracker()
    return train.epoch_logger(_cluster().rank, None, tracker)


def _open_tracker(environ: Mapping[str, str], cluster: cluster_spec.Cluster) -> Any:
    """The chief's run logs `replicas` as the built-in trainer's does, so runs of either path compare."""
    uri = environ.get(names.ENV_TRACKING_URI, "").strip()
    if not cluster.is_chief or not uri:
        return mlflow_run.NullTracker()
    name = environ.get(names.ENV_JOB_NAME) or "mirrored-strategy-runner"
    return mlflow_run.MlflowTracker(
        tracking_uri=uri,
        experiment_name=environ.get(names.ENV_EXPERIMENT_NAME) or name,
        job_name=name,
        job_namespace=environ.get(names.ENV_JOB_NAMESPACE) or "default",
        job_uid=environ.get(names.ENV_JOB_UID) or f"local-{uuid.uuid4()}",
        restart_count=int(environ.get(names.ENV_RESTART_COUNT) or 0),
        params={"replicas": cluster.num_workers},
        registered_model_name=environ.get(names.ENV_REGISTERED_MODEL_NAME) or None,
    )


def run_here(
    train_fn: Callable[..., Any],
    kwargs: Mapping[str, Any],
    use_custom_strategy: bool,
    summary: dict[str, Any] | None = None,
) -> Any:
    """Run train_fn on this worker of the cluster TF_CONFIG describes; its result on the chief, else None.

    `summary` (when given: the job's result is asked for) receives the chief's runId, experimentId,
    modelUri and its return value (mwms_trainer.result: ResultError when it cannot be the job's). Called again
    from inside train_fn (a spec.code script that calls MirroredStrategyRunner.run itself), it runs the inner
    function in the run already open: the peers are there and the job has its one MLflow run.
    """
    if "tracker" in _state:
        if use_custom_strategy:
            result = train_fn(**kwargs)
        else:  # the outer run's backstop covers this constructor too
            with tensorflow().distribute.MultiWorkerMirroredStrategy().scope():
                result = train_fn(**kwargs)
        _state["result"] = result if _cluster().is_chief else None
        return _state["result"]
    tensorflow()  # TF_USE_LEGACY_KERAS before the user's code imports TensorFlow
    size_thread_pools(thread_count(os.environ))
    cluster = _cluster()
    started = time.monotonic()
    deadline = started + float(os.environ.get(names.ENV_STARTUP_TIMEOUT) or 300)
    peers_by = rendezvous.peer_deadline(started, peer_wait_seconds(os.environ))
    path = os.environ.get(names.ENV_TERMINATION_LOG, "").strip() or names.TERMINATION_MESSAGE_PATH

    def note(message: str) -> None:
        termination.write(path, message)

    tracker = _open_tracker(os.environ, cluster)
    _state["tracker"] = tracker
    ok = False
    try:
        if use_custom_strategy:
            # train_fn creates the strategy itself; make sure its peers are there first, and give its
            # constructor the built-in trainer's backstop.
            rendezvous.meet(cluster, deadline, peers_by)
            with (
                rendezvous.backstopped_user_strategy(deadline, note),
                rendezvous.peer_loss_is_retryable("in train_fn"),
                tracker.models_logged_once(),
            ):
                result = train_fn(**kwargs)
        else:
            strategy = rendezvous.create_strategy(cluster, deadline, note, peers_by)
            with (
                strategy.scope(),
                rendezvous.peer_loss_is_retryable("in train_fn"),
                tracker.models_logged_once(),
            ):
                result = train_fn(**kwargs)
        if summary is not None:
            if cluster.is_chief:  # the job's result: checked before the run is marked FINISHED
                summary.update(job_result.summary_fields(result, tracker.log_text))
            fields = {
                "runId": tracker.run_id,
                "experimentId": tracker.experiment_id,
                "modelUri": _state.get("model_uri"),
            }
            summary.update({k: v for k, v in fields.items() if v is not None})
        ok = True
        return result if cluster.is_chief else None
    finally:
        tracker.close(ok)
        for key in ("tracker", "model_uri", "result"):
            _state.pop(key, None)


class MirroredStrategyRunner:
    """spark-tensorflow-distributor's signature (Spark-only arguments are accepted and ignored). Running on
    Kubernetes from a notebook is the client's: `from mwms import Cluster, MirroredStrategyRunner`."""

    def __init__(
        self,
        num_slots: int = 1,
        local_mode: bool = False,
        use_gpu: bool = False,
        gpu_resource_name: str = "gpu",
        use_custom_strategy: bool = False,
        cluster: Any = None,
    ) -> None:
        if cluster is not None:  # the client's runner: this package never imports the client
            raise TypeError(
                "MirroredStrategyRunner(cluster=...) submits to Kubernetes: that is the client's runner. "
                "pip install mwms, then `from mwms import Cluster, MirroredStrategyRunner`"
            )
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive integer, got {num_slots!r}")
        self.num_slots = num_slots
        self.use_custom_strategy = use_custom_strategy

    def run(self, train_fn: Callable[..., Any], **kwargs: Any) -> Any:
        """The chief's return value. In a worker pod: train_fn on this worker. Otherwise: num_slots local
        processes."""
        if os.environ.get(names.ENV_TF_CONFIG):
            return run_here(train_fn, kwargs, self.use_custom_strategy)
        return self._run_local(train_fn, kwargs)

    def _run_local(self, train_fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
        """`num_slots` local workers on free 127.0.0.1 ports; `train_fn` travels to them with cloudpickle (by
        value from `__main__`, else by reference: they get this process's sys.path)."""
        with tempfile.TemporaryDirectory(prefix="mwms-runner-") as tmp:
            work = Path(tmp)
            result = work / "result.pkl"
            (work / "fn.pkl").write_bytes(
                cloudpickle.dumps((train_fn, dict(kwargs), self.use_custom_strategy))
            )
            hosts = [f"127.0.0.1:{p}" for p in local.free_ports(self.num_slots)]
            uid = str(uuid.uuid4())
            job_name = os.environ.get(names.ENV_JOB_NAME) or str(getattr(train_fn, "__name__", "train"))
            path = os.pathsep.join(p for p in sys.path if p and Path(p).exists())
            envs = []
            for index in range(self.num_slots):
                env = dict(os.environ)
                env.update(
                    {
                        names.ENV_TF_CONFIG: json.dumps(tf_config(hosts, index)),
                        names.ENV_JOB_UID: uid,
                        names.ENV_JOB_NAME: job_name,
                        "PYTHONPATH": path,
                    }
                )
                envs.append(env)
            worker = [sys.executable, "-m", "mwms_trainer.strategy_runner", str(work / "fn.pkl"), str(result)]
            procs = [local.spawn(worker, env) for env in envs]
            codes = local.wait_workers(procs, work, show=sys.stderr, show_all=True)
            if codes[0] != 0:
                tail = (work / "worker-0.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the chief failed (exit codes {codes}); the end of its log:\n{tail}")
            with open(result, "rb") as f:
                return cloudpickle.load(f)


def _worker_main(argv: list[str]) -> int:
    """`python -m mwms_trainer.strategy_runner FN.pkl RESULT.pkl`: one local worker of the runner."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    tensorflow()  # before unpickling: the user's module may import TensorFlow, and tf.keras must be tf-keras
    with open(argv[0], "rb") as f:
        train_fn, kwargs, custom = cloudpickle.load(f)
    try:
        result = run_here(train_fn, kwargs, custom)
    except TrainerError as e:
        logging.getLogger("mwms_trainer").error("%s", e)
        return e.exit_code
    if is_chief():
        with open(argv[1], "wb") as f:
            cloudpickle.dump(result, f)
    return names.EXIT_SUCCESS


if __name__ == "__main__":
    # Through the imported module: the helpers train_fn calls must see the same _state as run_here.
    from mwms_trainer import strategy_runner

    sys.exit(strategy_runner._worker_main(sys.argv[1:]))
