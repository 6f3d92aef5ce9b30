"""The chief's MLflow run, one per TrainJob (found again by the job's uid tag after a restart), and
its one model. Other workers get NullTracker and never import mlflow.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import version
from typing import Any, TypeVar

import numpy as np

from mwms_contract import names
from mwms_trainer.errors import MlflowRefusedError, RetryableError
from mwms_trainer.retries import RETRY_DELAYS_SECONDS, came_from_mlflow, with_retries

log = logging.getLogger("mwms_trainer")
T = TypeVar("T")

# The run's tags, named in the contract (the operator and the client find the run by them).
TAG_JOB_NAME = names.MLFLOW_TAG_JOB_NAME
TAG_JOB_NAMESPACE = names.MLFLOW_TAG_JOB_NAMESPACE
TAG_JOB_UID = names.MLFLOW_TAG_JOB_UID
TAG_RESTART_COUNT = names.MLFLOW_TAG_RESTART_COUNT
TAG_RESUMED_FROM_EPOCH = names.MLFLOW_TAG_RESUMED_FROM_EPOCH
TAG_RESUMED_FROM_STEP = names.MLFLOW_TAG_RESUMED_FROM_STEP
TAG_DROPPED_METRICS = names.MLFLOW_TAG_DROPPED_METRICS
MODEL_NAME = "model"
# A pyfunc model from code around the Keras model: MLflow's tensorflow flavour takes only a tensor signature
# of one dtype, which refuses float64 rows, DataFrames and lists.
SERVING_MODEL_CODE = os.path.join(os.path.dirname(__file__), "serving_model.py")


class NullTracker:
    """What non-chief workers get: the same calls, nothing happens."""

    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None

    def log_epoch(self, epoch: int, logs: Mapping[str, float]) -> None:
        pass

    def note_resume(self, epoch: int, step: int) -> None:
        pass

    def activate(self) -> None:
        pass

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log_model(self, model: Any, columns: Sequence[str], metrics: Mapping[str, float]) -> str | None:
        return None

    def models_logged_once(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def log_text(self, text: str, artifact_file: str) -> str | None:
        return None

    def close(self, ok: bool) -> None:
        pass


class MlflowTracker:
    def __init__(
        self,
        *,
        tracking_uri: str,
        experiment_name: str,
        job_name: str,
        job_namespace: str,
        job_uid: str,
        restart_count: int,
        params: Mapping[str, Any],
        registered_model_name: str | None = None,
        delays: tuple[float, ...] = RETRY_DELAYS_SECONDS,
    ) -> None:
        # Bound each HTTP call: our own retry loop decides when MLflow counts as unavailable.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        import mlflow

        self._mlflow = mlflow
        self._uri = self.tracking_uri = tracking_uri
        self._delays = delays
        self._registered_model_name = registered_model_name
        mlflow.set_tracking_uri(tracking_uri)
        self._client = mlflow.MlflowClient(tracking_uri)
        self.experiment_id = self._retry("experiment lookup", lambda: self._experiment(experiment_name))
        existing = self._retry("run lookup", lambda: self._find_run(job_uid))
        if existing is not None:
            log.info("continuing MLflow run %s of job uid %s (restart %d)", existing, job_uid, restart_count)
            run = self._retry("run resume", lambda: mlflow.start_run(run_id=existing))
        else:
            tags = {TAG_JOB_NAME: job_name, TAG_JOB_NAMESPACE: job_namespace, TAG_JOB_UID: job_uid}
            # run_name explicitly: the generated names come from Python's seeded `random` (all seeded runs
            # would share one name).
            run = self._retry(
                "run creation",
                lambda: mlflow.start_run(experiment_id=self.experiment_id, run_name=job_name, tags=tags),
            )
            self._retry("params", lambda: mlflow.log_params({k: _param(v) for k, v in params.items()}))
            log.info("opened MLflow run %s for job uid %s", run.info.run_id, job_uid)
        self.run_id: str = run.info.run_id
        # A continued run keeps counting what earlier groups dropped.
        self._dropped = self._dropped_said = _count((run.data.tags or {}).get(TAG_DROPPED_METRICS))
        self._retry("tags", lambda: mlflow.set_tag(TAG_RESTART_COUNT, str(restart_count)))

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        return with_retries(what, self._uri, call, self._delays)

    def retry(self, what: str, call: Callable[[], T]) -> T:
        """`call`, a request to this tracking server, retried as every call of the chief's is."""
        return self._retry(what, call)

    def activate(self) -> None:
        """Make the run the calling thread's active run, for the fluent calls here and in user code: MLflow
        keeps one per thread, and the run may have been opened in another. A no-op where it is already."""
        active = self._mlflow.active_run()
        if active is None or active.info.run_id != self.run_id:
            self._retry("run resume", lambda: self._mlflow.start_run(run_id=self.run_id))

    def _experiment(self, name: str) -> str:
        found = self._client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self._client.create_experiment(name)
        except self._mlflow.exceptions.MlflowException:
            found = self._client.get_experiment_by_name(name)  # created meanwhile by another job's chief
            if found is None:
                raise
            return found.experiment_id

    def _find_run(self, job_uid: str) -> str | None:
        runs = self._client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TAG_JOB_UID}` = '{job_uid}'",
            order_by=["attributes.start_time ASC"],
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def log_epoch(self, epoch: int, logs: Mapping[str, float]) -> None:
        metrics = {k: float(v) for k, v in logs.items() if isinstance(v, int | float | np.floating)}
        try:
            self._mlflow.log_metrics(metrics, step=epoch)
        except Exception as e:  # a lost progress point must not stop the group's fit
            self._dropped += 1
            log.warning(
                "could not log epoch %d metrics to MLflow (%d dropped; counted in the run's tag %s): %s",
                epoch,
                self._dropped,
                TAG_DROPPED_METRICS,
                e,
            )
            return
        if self._dropped > self._dropped_said:  # MLflow answers again: say the count now, not only at the end
            with contextlib.suppress(Exception):
                self._say_dropped()

    def note_resume(self, epoch: int, step: int) -> None:
        tags = {TAG_RESUMED_FROM_EPOCH: str(epoch), TAG_RESUMED_FROM_STEP: str(step)}
        self._retry("tags", lambda: self._mlflow.set_tags(tags))

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Params known only once the workers have met (a restarted group logs the same values again)."""
        self._retry("params", lambda: self._mlflow.log_params({k: _param(v) for k, v in params.items()}))

    def _ready_model_uri(self) -> str | None:
        ready = ready_model(self._client, self.experiment_id, self.run_id, None, self._registered_model_name)
        return None if ready is None else f"models:/{ready.model_id}"

    def _upload(self, model: Any, columns: Sequence[str]) -> str:
        existing = self._ready_model_uri()  # again on every attempt: a lost answer may hide a finished upload
        if existing is not None:
            log.info("run %s already has its model %s; not logging a second one", self.run_id, existing)
            return existing
        with tempfile.TemporaryDirectory(prefix="mwms-model-") as tmp:
            keras_path = os.path.join(tmp, "model.keras")
            model.save(keras_path)
            info = self._mlflow.pyfunc.log_model(
                name=MODEL_NAME,
                python_model=SERVING_MODEL_CODE,
                artifacts={"keras_model": keras_path},
                signature=model_signature(),
                model_config={"columns": list(columns)},  # serving_model.py checks its input against them
                registered_model_name=self._registered_model_name,
                pip_requirements=serving_requirements(),
            )
        return str(info.model_uri)

    def log_model(self, model: Any, columns: Sequence[str], metrics: Mapping[str, float]) -> str:
        """Held-out metrics and the run's one READY model (a retried chief reuses the model it logged);
        `columns`: the training columns, in the order the model takes them."""
        self._retry("final metrics", lambda: self._mlflow.log_metrics(dict(metrics)))
        return self._retry("model upload", lambda: self._upload(model, columns))

    @contextlib.contextmanager
    def models_logged_once(self) -> Iterator[None]:
        """While user code runs on the chief: each model it logs into this run (every flavour's log_model ends
        in mlflow.models.Model.log) is retried as the built-in upload is, and logged once per name, so a
        restarted group reuses the READY model instead of logging a second one."""
        from mlflow.models import Model

        original = Model.__dict__["log"]  # the classmethod itself, to put back
        log_model = original.__func__
        parameters = inspect.signature(log_model)
        tracker = self

        def log(cls: type, *args: Any, **kwargs: Any) -> Any:
            given = parameters.bind(cls, *args, **kwargs).arguments
            if given.get("model_id") or given.get("run_id") not in (None, tracker.run_id):
                return log_model(cls, *args, **kwargs)  # into another model or run: not the job's to dedupe
            name = given.get("name") or given.get("artifact_path")
            if name is None:  # MLflow would pick a random name, which a restart could not recognise
                name = kwargs["name"] = MODEL_NAME
            registered = given.get("registered_model_name")
            return tracker._log_once(name, registered, lambda: log_model(cls, *args, **kwargs))

        Model.log = classmethod(log)  # type: ignore[method-assign, assignment]
        try:
            yield
        finally:
            Model.log = original  # type: ignore[method-assign]

    def _log_once(self, name: str, registered_model_name: str | None, upload: Callable[[], Any]) -> Any:
        def attempt() -> Any:
            # Again on every attempt: a lost answer may hide a finished upload.
            ready = ready_model(self._client, self.experiment_id, self.run_id, name, registered_model_name)
            if ready is None:
                return upload()
            log.info(
                "run %s already has its model %r (%s): not logging it again",
                self.run_id,
                name,
                ready.model_id,
            )
            return self._mlflow.models.Model.load(f"models:/{ready.model_id}").get_model_info(ready)

        return with_retries(f"log_model of {name!r}", self._uri, attempt, self._delays, came_from_mlflow)

    def log_text(self, text: str, artifact_file: str) -> str:
        """`text` as an artifact of the run (the same file again on a retry); its runs:/ URI."""
        self._retry(artifact_file, lambda: self._mlflow.log_text(text, artifact_file))
        return f"runs:/{self.run_id}/{artifact_file}"

    def _say_dropped(self) -> None:
        self._client.set_tag(self.run_id, TAG_DROPPED_METRICS, str(self._dropped))
        self._dropped_said = self._dropped

    def close(self, ok: bool) -> None:
        """The count of dropped metrics, then the run's end, each retried as every call is. A run that still
        cannot be ended does not fail the job (its model is logged): the operator ends it once the job has
        ended, or names it in the job's MlflowRunEnded condition."""
        status = "FINISHED" if ok else "FAILED"

        def end() -> None:
            active = self._mlflow.active_run()
            if active is not None and active.info.run_id == self.run_id:
                self._mlflow.end_run(status=status)  # the thread's active run goes first, then the request
            else:  # a retry (the active run is gone already), or the run was opened in another thread
                self._client.set_terminated(self.run_id, status)

        steps = [("dropped-metrics tag", self._say_dropped)] if self._dropped > self._dropped_said else []
        for what, call in [*steps, ("run end", end)]:
            try:
                self._retry(what, call)
            except (RetryableError, MlflowRefusedError) as e:
                log.warning("MLflow run %s (%s): %s", self.run_id, status, e)


def ready_model(
    client: Any, experiment_id: str, run_id: str, name: str | None, registered_model_name: str | None
) -> Any | None:
    """The run's one READY model (of that name, when given), after deleting what uploads that died (PENDING)
    or failed (FAILED) left behind: a model without all its artifacts must never be handed out, nor stay
    beside the real one. Registered exactly once under registered_model_name, when given."""
    import mlflow

    models = [
        m
        for m in mlflow.search_logged_models(
            experiment_ids=[experiment_id],
            filter_string=f"source_run_id = '{run_id}'",
            order_by=[{"field_name": "creation_time", "ascending": True}],
            output_format="list",
        )
        if name is None or m.name == name
    ]
    ready = next((m for m in models if str(m.status) == "READY"), None)
    for m in models:
        if m is not ready:
            log.info("deleting model %s (%s), left by an interrupted upload", m.model_id, m.status)
            client.delete_logged_model(m.model_id)
    if ready is not None and registered_model_name:
        register_once(client, registered_model_name, run_id, ready.model_id)
    return ready


def register_once(client: Any, name: str, run_id: str, model_id: str) -> None:
    """The READY model is registered exactly once: a chief that died between the upload and the
    registration left it unregistered; a registration that did not finish is deleted and redone."""
    import mlflow

    versions = [
        v
        for v in client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
        # The REST search leaves model_id empty; the source (the model's artifact location) names it.
        if v.model_id == model_id or model_id in (v.source or "")
    ]
    keep = next((v for v in versions if str(v.status) == "READY"), None)
    for v in versions:
        if v is not keep:
            log.info("deleting version %s of registered model %s (%s)", v.version, name, v.status)
            client.delete_model_version(name, v.version)
    if keep is None:
        uri = f"models:/{model_id}"
        log.info("registering %s as %s", uri, name)
        mlflow.register_model(uri, name)


def model_signature() -> Any:
    """Outputs only: the model checks its input itself (serving_model.py, against the training columns in its
    model_config), since no input schema of MLflow's takes both rows and frames by name
    (docs/design/serving-model-signature.md)."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    return ModelSignature(inputs=None, outputs=Schema([ColSpec("float")]))


def serving_requirements() -> list[str]:
    """What loading the model needs, stated: inferring it re-imports TensorFlow in a subprocess."""
    return [f"{name}=={version(name)}" for name in ("tensorflow", "tf-keras", "mlflow", "numpy")]


def _count(tag: str | None) -> int:
    return int(tag) if tag and tag.isdigit() else 0


def _param(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
