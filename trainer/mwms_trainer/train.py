"""The built-in fit: data, tracker, strategy, model, fit; the chief logs a plain copy of the model.

Every worker runs the same code; only the tracker differs (MlflowTracker on the chief, NullTracker elsewhere).
"""

from __future__ import annotations

import logging
import math
import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from mwms_contract import termination
from mwms_trainer import checkpoint_store, kept, mlflow_run, rendezvous
from mwms_trainer import model as model_mod
from mwms_trainer.errors import DivergedError, RetryableError
from mwms_trainer.group_checkpoint import (
    GroupCheckpoint,
    ResumePoint,
    StoppedAfterSave,
    StopSignal,
    agree_on_resume,
)
from mwms_trainer.input import TrainingInput, prepare_input
from mwms_trainer.tfenv import keras, size_thread_pools
from mwms_trainer.trainer_config import Settings

log = logging.getLogger("mwms_trainer")


def open_tracker(settings: Settings, params: dict[str, Any]) -> Any:
    if not settings.cluster.is_chief:
        return mlflow_run.NullTracker()
    return mlflow_run.MlflowTracker(
        tracking_uri=settings.tracking_uri,
        experiment_name=settings.experiment_name,
        job_name=settings.job_name,
        job_namespace=settings.job_namespace,
        job_uid=settings.job_uid,
        restart_count=settings.restart_count,
        params=params,
        registered_model_name=settings.registered_model_name,
    )


def params_of(settings: Settings, data: TrainingInput) -> dict[str, Any]:
    """The run's params. Versions from the installed distributions: importing the packages to read their
    __version__ would cost seconds before the run opens (TensorFlow imports in the background meanwhile)."""
    n = settings.cluster.num_workers
    return {
        **settings.trainer.as_params(),
        "replicas": n,
        "perWorkerBatchSize": settings.trainer.globalBatchSize // n,
        **data.sizes(),
        "features": data.num_features,
        "tensorflowVersion": version("tensorflow"),
        "tfKerasVersion": version("tf-keras"),
        "sklearnVersion": version("scikit-learn"),
        "pythonVersion": platform.python_version(),
    }


class OpeningTracker:
    """The chief's MLflow run, opened in a thread (an import and ~5 HTTP calls) while TensorFlow imports and
    the group meets; other workers get a NullTracker at once. wait() returns the tracker or raises what
    opening it raised (RetryableError, exit 75, for an unreachable server), as opening it in place did."""

    def __init__(self, settings: Settings, params: dict[str, Any]) -> None:
        self._result: list[Any] = []
        self._error: list[Exception] = []
        self._thread: threading.Thread | None = None
        if not settings.cluster.is_chief:
            self._result.append(mlflow_run.NullTracker())
            return

        def target() -> None:
            try:
                self._result.append(open_tracker(settings, params))
            except Exception as e:  # re-raised by wait() on the main thread
                self._error.append(e)

        # A daemon: whatever ends the process early is not held up by MLflow's retries.
        self._thread = threading.Thread(target=target, name="mwms-open-mlflow-run", daemon=True)
        self._thread.start()

    def wait(self) -> Any:
        if self._thread is not None:
            self._thread.join()
        if self._error:
            raise self._error[0]
        tracker = self._result[0]
        tracker.activate()  # the run was opened in another thread; the fluent calls need it on this one
        return tracker

    def check(self) -> None:
        """Raise what opening raised, if it has failed already; never waits."""
        if self._error:
            raise self._error[0]

    def close(self, ok: bool) -> None:
        """End the run as FINISHED or FAILED, once it is open (a run that never opened has nothing to end)."""
        if self._thread is not None:
            self._thread.join()
        if self._result:
            self._result[0].close(ok)
        elif self._error:
            log.warning("the MLflow run was not opened: %s", self._error[0])


def epoch_logger(rank: int, epochs: int | None, tracker: Any, resume: ResumePoint | None = None) -> Any:
    """Progress on every worker's log; the chief's tracker also sends it to MLflow (with where a restarted
    group resumed)."""
    k = keras()
    resumed = resume if resume is not None and resume.found else None

    class EpochLogger(k.callbacks.Callback):  # type: ignore[name-defined]
        first_epoch: int | None = None
        started = 0.0
        whole_call = 1  # steps per call of the train function (compile's steps_per_execution)
        stepped = False
        epoch_ended = False

        def on_train_begin(self, logs: Any = None) -> None:
            # The first call of the train function runs one step, so its end is the first optimizer step
            # (startup latency, for `python -m mwms_bench trainer`); later calls run whole epochs again. One
            # more call in the first epoch, no sync per step.
            self.whole_call = int(self.model.steps_per_execution.numpy())
            self.model.steps_per_execution = 1

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if not self.stepped:
                self.stepped = True
                self.model.steps_per_execution = self.whole_call
                steps, done = batch + 1, time.time()
                log.info("worker %d first step done at unix time %.3f, after %d step(s)", rank, done, steps)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.started = time.monotonic()
            if self.first_epoch is None:
                self.first_epoch = epoch
                if resumed is not None:
                    log.info("worker %d resumes from the checkpoint at %s", rank, resumed)
                    tracker.note_resume(resumed.epoch, resumed.step)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            logs = dict(logs or {})
            shown = " ".join(f"{k}={v:.4f}" for k, v in sorted(logs.items()))
            of = f"/{epochs}" if epochs else ""
            seconds = time.monotonic() - self.started
            print(f"worker {rank} epoch {epoch + 1}{of} {shown} seconds={seconds:.3f}", flush=True)
            if not self.epoch_ended:  # beside the first step's line (the trainer bench reads both)
                self.epoch_ended = True
                log.info("worker %d first epoch done at unix time %.3f", rank, time.time())
            tracker.log_epoch(epoch, logs)

    return EpochLogger()


def stop_on_non_finite_loss(epochs: int) -> Any:
    """Fail the fit (every worker sees the same reduced loss) instead of logging a NaN model."""
    k = keras()

    class NonFiniteLossGuard(k.callbacks.Callback):  # type: ignore[name-defined]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            loss = float((logs or {}).get("loss", 0.0))
            if not math.isfinite(loss):
                raise DivergedError(
                    f"the loss became {loss} in epoch {epoch + 1} of {epochs}: the fit diverged "
                    "(lower learningRate, or check the data's scale); no model was logged"
                )

    return NonFiniteLossGuard()


@dataclass(frozen=True)
class Fitted:
    """What the chief has after the fit: a plain copy of the model, its last epoch's metrics, and the store
    of the checkpoint, kept until the model is logged (a restart before then resumes at the fit's end)."""

    model: Any
    trained: dict[str, float]
    store: checkpoint_store.Store | None


def fit(
    settings: Settings,
    data: TrainingInput,
    opening: OpeningTracker,
    note: Callable[[str], None],
    deadline: float,
    peers_by: float | None,
) -> Fitted | None:
    """Fit with the whole group; the chief gets a plain copy of the model and its last epoch's metrics."""
    cfg, cluster = settings.trainer, settings.cluster
    size_thread_pools(settings.threads)  # waits for TensorFlow's import, like everything from here on
    k = keras()
    # The chief's MLflow run opens during the rendezvous; a failure ends the chief there, before registering.
    strategy = rendezvous.create_strategy(cluster, deadline, note, peers_by, opening.wait, opening.check)
    tracker = opening.wait()
    with rendezvous.peer_loss_is_retryable("while gathering the data's statistics"):
        agreed = data.agree(strategy)
    if agreed.params:
        tracker.log_params(agreed.params)
    steps = agreed.steps_per_epoch
    checkpoint = group_checkpoint(settings, strategy, tracker, steps)
    k.utils.set_random_seed(cfg.seed)  # the same initial weights everywhere (MWMS also broadcasts them)
    every = settings.checkpoint_every_steps
    with strategy.scope():
        model = model_mod.build_model(
            data.num_features,
            agreed.mean,
            agreed.variance,
            hidden_units=cfg.hiddenUnits,
            learning_rate=cfg.learningRate,
            # Calls of whole epochs, or of everySteps steps: a save comes between two calls.
            steps_per_execution=min(steps, every) if every else steps,
            stop_signal=checkpoint.stop if checkpoint else None,
        )
    resume = checkpoint.resume if checkpoint else ResumePoint()
    callbacks = [stop_on_non_finite_loss(cfg.epochs), epoch_logger(cluster.rank, cfg.epochs, tracker, resume)]
    if checkpoint:  # last: it saves an epoch once the others have logged it and checked its loss
        callbacks.append(checkpoint.callback())
    dataset = data.dataset(strategy, steps, resume.epoch, resume.step)
    with rendezvous.peer_loss_is_retryable("during fit"):
        history = model.fit(
            dataset,
            epochs=cfg.epochs,
            steps_per_epoch=steps,
            callbacks=callbacks,
            verbose=0,
        )
    if not cluster.is_chief:
        return None
    # The chief alone: a plain copy needs no collectives, so the peers may already be gone.
    trained = {k: float(v[-1]) for k, v in history.history.items() if v}
    return Fitted(model_mod.plain_copy(model), trained, checkpoint.store if checkpoint else None)


def checkpoint_dir(settings: Settings) -> str | None:
    """The job's checkpoint folder (per job uid: a later job on the same volume never resumes another's)."""
    return os.path.join(settings.checkpoint_dir, settings.job_uid) if settings.checkpoint_dir else None


def group_checkpoint(settings: Settings, strategy: Any, tracker: Any, steps: int) -> GroupCheckpoint | None:
    """With spec.checkpoint: the chief fetches the store's checkpoint, and the group agrees where it resumes
    (before the input is built: fit reads its dataset from the first batch whatever step it resumes at)."""
    directory = checkpoint_dir(settings)
    if directory is None:
        return None
    cluster = settings.cluster
    store = checkpoint_store.open_store(
        settings.checkpoint_store, directory, settings.job_uid, tracker, cluster.is_chief
    )
    if cluster.is_chief:
        started = time.monotonic()
        store.fetch(os.path.join(directory, checkpoint_store.CHIEF_DIR))
        log.info("checkpoint fetched from %s in %.3f s", store.where, time.monotonic() - started)
    with rendezvous.peer_loss_is_retryable("while agreeing where to resume"):
        resume = agree_on_resume(strategy, directory, cluster.is_chief, steps)
    return GroupCheckpoint(
        directory=directory,
        store=store,
        is_chief=cluster.is_chief,
        rank=cluster.rank,
        steps_per_epoch=steps,
        every_steps=settings.checkpoint_every_steps,
        resume=resume,
        stop=StopSignal(),
        termination_log=settings.termination_log,
    )


def run(settings: Settings, note: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Train on this worker; return the termination summary (the chief's carries the run and the model)."""
    started = time.monotonic()
    deadline = started + settings.startup_timeout_seconds
    peers_by = rendezvous.peer_deadline(started, settings.peer_wait_seconds)
    cluster = settings.cluster
    kept_dir = kept.kept_model_dir(settings)
    if kept_dir is not None and kept.fit_is_kept(kept_dir):
        return upload_kept(settings, kept_dir)
    data = prepare_input(settings.trainer, cluster.num_workers, cluster.rank)  # bad data fails here
    params = params_of(settings, data)
    opening = OpeningTracker(settings, params)
    ok = stopped = False
    try:
        fitted = fit(settings, data, opening, note, deadline, peers_by)
        if fitted is None:
            ok = True
            return {"worker": cluster.rank, "status": "ok"}
        held_out = model_mod.held_out_metrics(fitted.model, data.held_out())
        upload = kept.Upload(params, list(data.feature_names), fitted.trained, held_out)
        if kept_dir:
            kept.keep_fitted(kept_dir, fitted.model, upload)
        summary = log_fitted(opening.wait(), fitted.model, upload, kept_dir)
        ok = True
        if fitted.store is not None:
            discard(fitted.store)
        return summary
    except StoppedAfterSave:
        stopped = True  # the run goes on in the next group: it is left open, as a killed chief leaves it
        raise
    finally:
        if not stopped:
            opening.close(ok)


def discard(store: checkpoint_store.Store) -> None:
    """The model is logged: the checkpoint has nothing left to resume. One left behind costs only space."""
    try:
        store.discard()
    except Exception as e:
        log.warning("the checkpoint in %s was not removed: %s", store.where, e)


def upload_kept(settings: Settings, kept_dir: str) -> dict[str, Any]:
    """A restart after the fit ended: the chief uploads the model kept on the volume, with no data loaded
    and no peers met (they end at once)."""
    rank = settings.cluster.rank
    if not settings.cluster.is_chief:
        log.info("worker %d: the fit is done (kept at %s); the chief uploads it", rank, kept_dir)
        return {"worker": rank, "status": "ok"}
    log.info("uploading the model fitted before the restart (%s), not training again", kept_dir)
    rendezvous.mark_joined()  # no group to join: the peers ended (the fit is kept)
    size_thread_pools(settings.threads)
    plain, upload = kept.load_kept(kept_dir)
    tracker = open_tracker(settings, upload.params)
    ok = False
    try:
        summary = log_fitted(tracker, plain, upload, kept_dir)
        ok = True
        discard(checkpoint_store.VolumeStore(os.path.dirname(kept_dir)))
        return summary
    finally:
        tracker.close(ok)


def log_fitted(tracker: Any, plain: Any, upload: kept.Upload, kept_dir: str | None) -> dict[str, Any]:
    """Log the model into the chief's run; the termination summary."""
    try:
        model_uri = tracker.log_model(plain, upload.columns, upload.held_out)
    except RetryableError as e:
        if kept_dir:
            kept_note = f"the fitted model is kept in {kept_dir}, a restart uploads it"
            raise RetryableError(f"{e}; {kept_note}") from None
        raise
    # The last epoch's training metrics are in MLflow already (per epoch); the summary carries both.
    metrics = {**upload.held_out, **upload.training}
    log.info("held-out accuracy %.4f, model %s", metrics["val_accuracy"], model_uri)
    return {
        termination.RUN_ID: tracker.run_id,
        termination.EXPERIMENT_ID: tracker.experiment_id,
        termination.MODEL_URI: model_uri,
        termination.METRICS: {k: round(v, 6) for k, v in metrics.items()},
    }
