"""The trainer's settings, read once from the environment and validated before anything else happens.

MWMS_TRAINER_CONFIG is the TrainJob's `spec.trainer`. The defaults reproduce the seed, except 60 epochs for
its underfit one (docs/migration.md).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from mwms_contract import names
from mwms_trainer import cluster_spec, cpus, objectstore
from mwms_trainer.errors import ConfigError

DATASETS = ("breast_cancer", "synthetic", "csv", "parquet")
# exact: every worker holds every row, N workers == 1 worker (input/exact.py); files: each worker streams only
# its own files, for data larger than its memory (input/files.py).
SHARDINGS = ("exact", "files")
DEFAULT_STARTUP_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class TrainerConfig:
    dataset: str = "breast_cancer"
    seed: int = 42
    epochs: int = 60
    globalBatchSize: int = 32  # noqa: N815 (the TrainJob's camelCase names, so messages and params match the YAML)
    learningRate: float = 0.001  # noqa: N815
    testSize: float = 0.3  # noqa: N815
    hiddenUnits: tuple[int, ...] = ()  # noqa: N815
    syntheticSamples: int = 10000  # noqa: N815
    syntheticFeatures: int = 20  # noqa: N815
    dataPath: str | None = None  # noqa: N815
    labelColumn: str = "label"  # noqa: N815
    sharding: str = "exact"

    def as_params(self) -> dict[str, Any]:
        params = asdict(self)
        params["hiddenUnits"] = list(self.hiddenUnits)
        return params


def _setting(key: str) -> str:
    return f"{names.ENV_TRAINER_CONFIG}.{key}"


def _int(raw: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(_setting(key), f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(_setting(key), f"must be at least {minimum}, got {value}")
    return value


def _float(raw: Mapping[str, Any], key: str, default: float, low: float, high: float | None) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(_setting(key), f"must be a number, got {value!r}")
    if not value > low or (high is not None and not value < high):
        bound = f"between {low} and {high} (exclusive)" if high is not None else f"greater than {low}"
        raise ConfigError(_setting(key), f"must be {bound}, got {value}")
    return float(value)


def parse_trainer_config(raw_json: str | None, num_workers: int = 1) -> TrainerConfig:
    """Validate MWMS_TRAINER_CONFIG; unknown keys are errors, so a typo never falls back to a default."""
    if raw_json is None or not raw_json.strip():
        raw: Any = {}
    else:
        try:
            raw = json.loads(raw_json)
        except json.JSONDecodeError as e:
            raise ConfigError(names.ENV_TRAINER_CONFIG, f"is not valid JSON ({e.msg})") from None
    if not isinstance(raw, dict):
        raise ConfigError(names.ENV_TRAINER_CONFIG, "must be a JSON object")
    known = {f for f in TrainerConfig.__dataclass_fields__}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(_setting(unknown[0]), f"unknown setting; known: {', '.join(sorted(known))}")
    d = TrainerConfig()

    dataset = raw.get("dataset", d.dataset)
    if dataset not in DATASETS:
        raise ConfigError(_setting("dataset"), f"must be one of {', '.join(DATASETS)}, got {dataset!r}")
    hidden = raw.get("hiddenUnits", [])
    if not isinstance(hidden, list) or any(
        isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in hidden
    ):
        raise ConfigError(_setting("hiddenUnits"), f"must be a list of positive integers, got {hidden!r}")
    data_path = raw.get("dataPath")
    if dataset in ("csv", "parquet"):
        if not isinstance(data_path, str) or not data_path.strip():
            raise ConfigError(_setting("dataPath"), f"is required for dataset {dataset!r}")
        objectstore.check_data_path(data_path)  # an unsupported scheme exits 2 now, not at the first read
    elif data_path is not None and not isinstance(data_path, str):
        raise ConfigError(_setting("dataPath"), f"must be a string, got {data_path!r}")
    sharding = raw.get("sharding", d.sharding)
    if sharding not in SHARDINGS:
        raise ConfigError(_setting("sharding"), f"must be one of {', '.join(SHARDINGS)}, got {sharding!r}")
    if sharding == "files" and dataset not in ("csv", "parquet"):
        raise ConfigError(_setting("sharding"), f"files needs dataset csv or parquet, got {dataset!r}")
    label = raw.get("labelColumn", d.labelColumn)
    if not isinstance(label, str) or not label:
        raise ConfigError(_setting("labelColumn"), f"must be a non-empty string, got {label!r}")

    # Unset: the default rounded up to a multiple of the workers (33 for 3), so any replica count just works.
    default_batch = -(-d.globalBatchSize // num_workers) * num_workers
    batch = _int(raw, "globalBatchSize", default_batch, 1)
    # Equal per-worker slices make N workers compute exactly the 1-worker gradient (docs/migration.md).
    if batch < num_workers or batch % num_workers:
        raise ConfigError(
            _setting("globalBatchSize"),
            f"must be a multiple of the number of workers ({num_workers}), so every worker gets an equal "
            f"slice; got {batch}",
        )
    return TrainerConfig(
        dataset=dataset,
        seed=_int(raw, "seed", d.seed, 0),
        epochs=_int(raw, "epochs", d.epochs, 1),
        globalBatchSize=batch,
        learningRate=_float(raw, "learningRate", d.learningRate, 0.0, None),
        testSize=_float(raw, "testSize", d.testSize, 0.0, 1.0),
        hiddenUnits=tuple(hidden),
        syntheticSamples=_int(raw, "syntheticSamples", d.syntheticSamples, 10),
        syntheticFeatures=_int(raw, "syntheticFeatures", d.syntheticFeatures, 2),
        dataPath=data_path,
        labelColumn=label,
        sharding=sharding,
    )


@dataclass(frozen=True)
class Settings:
    cluster: cluster_spec.Cluster
    trainer: TrainerConfig
    tracking_uri: str
    experiment_name: str
    registered_model_name: str | None
    job_name: str
    job_namespace: str
    job_uid: str
    restart_count: int
    checkpoint_dir: str | None  # the volume every worker mounts; with a store, this worker's scratch copy
    startup_timeout_seconds: float
    termination_log: str
    peer_wait_seconds: float | None = None  # None: wait for peers as long as it takes
    threads: int | None = None  # TensorFlow's pool sizes (cpus.py); None: TensorFlow's own sizing
    checkpoint_store: str | None = None  # spec.checkpoint.store: "run" or an s3:// prefix; None: the volume
    checkpoint_every_steps: int | None = None  # None: save at the end of each epoch only


def _env_number(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(name, f"must be at least {minimum}, got {value}")
    return value


def load(environ: Mapping[str, str]) -> Settings:
    """Everything the trainer reads from its environment, validated; raises ConfigError naming the setting."""
    cluster = cluster_spec.from_tf_config(environ.get(names.ENV_TF_CONFIG))
    trainer = parse_trainer_config(environ.get(names.ENV_TRAINER_CONFIG), cluster.num_workers)
    job_name = environ.get(names.ENV_JOB_NAME, "").strip() or "mwms-job"
    tracking_uri = environ.get(names.ENV_TRACKING_URI, "").strip()
    if not tracking_uri:
        # Checked on every worker, so the whole group fails the same way before anything starts.
        raise ConfigError(names.ENV_TRACKING_URI, "is not set; the chief logs the run and the model there")
    return Settings(
        cluster=cluster,
        trainer=trainer,
        tracking_uri=tracking_uri,
        experiment_name=environ.get(names.ENV_EXPERIMENT_NAME, "").strip() or job_name,
        registered_model_name=environ.get(names.ENV_REGISTERED_MODEL_NAME, "").strip() or None,
        job_name=job_name,
        job_namespace=environ.get(names.ENV_JOB_NAMESPACE, "").strip() or "default",
        # Without a uid (a hand-started trainer) every start is its own job.
        job_uid=environ.get(names.ENV_JOB_UID, "").strip() or f"local-{uuid.uuid4()}",
        restart_count=_env_number(environ, names.ENV_RESTART_COUNT, 0, 0),
        checkpoint_dir=environ.get(names.ENV_CHECKPOINT_DIR, "").strip() or None,
        startup_timeout_seconds=_env_number(
            environ, names.ENV_STARTUP_TIMEOUT, DEFAULT_STARTUP_TIMEOUT_SECONDS, 1
        ),
        termination_log=environ.get(names.ENV_TERMINATION_LOG, "").strip() or names.TERMINATION_MESSAGE_PATH,
        threads=cpus.thread_count(environ),
        peer_wait_seconds=peer_wait_seconds(environ),
        checkpoint_store=checkpoint_store(environ),
        checkpoint_every_steps=_env_number(environ, names.ENV_CHECKPOINT_EVERY_STEPS, 0, 1) or None,
    )


def checkpoint_store(environ: Mapping[str, str]) -> str | None:
    """MWMS_CHECKPOINT_STORE: the job's run or an s3:// prefix (checked as the contract checks it); a store
    needs MWMS_CHECKPOINT_DIR too, for the chief's copy."""
    store = environ.get(names.ENV_CHECKPOINT_STORE, "").strip() or None
    if store is None:
        return None
    if store != names.CHECKPOINT_STORE_RUN:
        objectstore.check_uri(store, names.ENV_CHECKPOINT_STORE)
    if not environ.get(names.ENV_CHECKPOINT_DIR, "").strip():
        raise ConfigError(names.ENV_CHECKPOINT_DIR, "is not set: a checkpoint store needs a local directory")
    return store


def peer_wait_seconds(environ: Mapping[str, str]) -> float | None:
    """How long to wait for the peers: MWMS_PEER_WAIT_SECONDS (0: no limit), else the startup timeout (a
    hand-started group has nobody else to end a wait for a peer that never comes)."""
    startup = _env_number(environ, names.ENV_STARTUP_TIMEOUT, DEFAULT_STARTUP_TIMEOUT_SECONDS, 1)
    return _env_number(environ, names.ENV_PEER_WAIT, startup, 0) or None
