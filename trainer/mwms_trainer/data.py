"""The seeded data: every worker builds the same split, then trains on its own slice of each global batch.

Loading and splitting are numpy/sklearn only (no TensorFlow), so bad data fails before any peer is waited for.
Batches: each epoch is a seeded permutation of the training rows cut into full global batches; the remainder
(fewer rows than one global batch) is dropped, and a different remainder each epoch, so every row is still
seen. Full batches split into equal per-worker slices, which is what makes N workers compute exactly the
gradient of one worker (a partial last batch would split unevenly, and each worker's mean counts equally).
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mwms_trainer import objectstore
from mwms_trainer.errors import ConfigError
from mwms_trainer.objectstore import S3Object
from mwms_trainer.tfenv import tensorflow
from mwms_trainer.trainer_config import TrainerConfig

_SETTING = "MWMS_TRAINER_CONFIG"


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray  # raw (unscaled) float32 rows: the scaler lives inside the model
    y_train: np.ndarray  # float32 0/1
    x_test: np.ndarray
    y_test: np.ndarray
    feature_names: tuple[str, ...]
    mean: np.ndarray  # StandardScaler statistics of the training split only
    variance: np.ndarray  # scaler_variance: 1 for a constant column

    @property
    def num_features(self) -> int:
        return int(self.x_train.shape[1])


DataFile = Path | S3Object  # a file in the worker, or an object in a bucket (objectstore.py)


def table_files(data_path: str, dataset: str) -> list[DataFile]:
    """The files a csv/parquet dataPath names: a file; a directory's `*.<dataset>` files (Spark's output
    layout: its `_SUCCESS` and `.crc` markers are skipped); or a glob; the same in a bucket for an s3:// URI.
    Sorted by name, so every worker reads the rows in the same order."""
    if objectstore.is_uri(data_path):
        return list(objectstore.list_files(data_path, dataset))
    path = Path(data_path)
    if path.is_file():
        return [path]
    if path.is_dir():
        if (path / objectstore.DELTA_LOG).is_dir():
            raise ConfigError(f"{_SETTING}.dataPath", objectstore.delta_table(data_path))
        files = [f for f in path.glob(f"*.{dataset}") if f.is_file() and not f.name.startswith(("_", "."))]
        where = f"directory {data_path!r} holds no *.{dataset} files"
    else:
        files = [Path(f) for f in glob.glob(data_path) if Path(f).is_file()]
        where = f"{data_path!r} is not a readable file, directory or glob of files"
    if not files:
        raise ConfigError(f"{_SETTING}.dataPath", where)
    return list(sorted(files))


@contextlib.contextmanager
def source(file: DataFile, dataset: str) -> Iterator[Any]:
    """What the parsers read `file` from: its path, or an object's pyarrow file (streamed, not staged)."""
    if isinstance(file, S3Object):
        with objectstore.opened(file, dataset) as handle:
            yield handle
    else:
        yield file


def read_file(file: DataFile, dataset: str, chunk_rows: int | None = None) -> Iterator[Any]:
    """A csv/parquet file as pandas frames: the whole file, or chunks of `chunk_rows` rows streamed from disk
    or the bucket (the large-data path, streaming.py). A file the parser refuses exits 2 naming it."""
    import pandas as pd

    with source(file, dataset) as where, readable(file, dataset):
        if chunk_rows is None:
            yield pd.read_csv(where) if dataset == "csv" else pd.read_parquet(where)
        elif dataset == "csv":
            yield from pd.read_csv(where, chunksize=chunk_rows)
        else:
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(where).iter_batches(batch_size=chunk_rows):
                yield batch.to_pandas()


@contextlib.contextmanager
def readable(file: DataFile, dataset: str) -> Iterator[None]:
    """Around a parser's read of `file`: a file the parser refuses exits 2 naming it (an object store's
    failure mid-read is what it means: objectstore.failure)."""
    try:
        yield
    except OSError as e:
        if isinstance(file, S3Object):
            raise objectstore.failure(str(file), e, os.environ) from None
        raise ConfigError(f"{_SETTING}.dataPath", f"cannot read {str(file)!r} as {dataset}: {e}") from None
    except Exception as e:  # the parsers raise many types; all mean "not a usable file"
        raise ConfigError(f"{_SETTING}.dataPath", f"cannot read {str(file)!r} as {dataset}: {e}") from None


def table_rows(frame: Any, cfg: TrainerConfig, where: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Feature rows (float64), 0/1 labels and feature names of one table frame."""
    import pandas as pd

    if cfg.labelColumn not in frame.columns:
        raise ConfigError(
            f"{_SETTING}.labelColumn",
            f"{cfg.labelColumn!r} is not a column of {where!r}: {list(frame.columns)}",
        )
    features = frame.drop(columns=[cfg.labelColumn])
    non_numeric = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if non_numeric or features.shape[1] == 0:
        raise ConfigError(
            f"{_SETTING}.dataPath", f"feature columns must be numeric; not numeric: {non_numeric}"
        )
    labels = frame[cfg.labelColumn].to_numpy()
    if not set(np.unique(labels)).issubset({0, 1}):
        raise ConfigError(f"{_SETTING}.labelColumn", f"{cfg.labelColumn!r} must hold 0/1 labels")
    return features.to_numpy(dtype=np.float64), labels, tuple(str(c) for c in features.columns)


def _read_table(cfg: TrainerConfig) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    import pandas as pd

    path = cfg.dataPath or ""
    frames = [frame for file in table_files(path, cfg.dataset) for frame in read_file(file, cfg.dataset)]
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    return table_rows(frame, cfg, path)


def load_features(
    cfg: TrainerConfig,
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Rows, labels and feature names."""
    if cfg.dataset == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        bunch: Any = load_breast_cancer()
        return bunch.data, bunch.target, tuple(str(n) for n in bunch.feature_names)
    if cfg.dataset == "synthetic":
        from sklearn.datasets import make_classification

        x, y = make_classification(
            n_samples=cfg.syntheticSamples,
            n_features=cfg.syntheticFeatures,
            n_informative=max(2, cfg.syntheticFeatures // 2),
            random_state=cfg.seed,
        )
        return x, y, tuple(f"f{i}" for i in range(cfg.syntheticFeatures))
    return _read_table(cfg)


def check_finite(x: np.ndarray, names: tuple[str, ...]) -> None:
    """Exit 2 before any peer is waited for: a NaN or an infinity trains a NaN model (also a float64 value
    beyond float32's range, which the model's float32 input turns into an infinity)."""
    with np.errstate(over="ignore"):
        bad = ~np.isfinite(x.astype(np.float32))
    if bad.any():
        columns = [names[i] for i in np.flatnonzero(bad.any(axis=0))]
        shown = ", ".join(map(repr, columns[:10])) + (
            f" and {len(columns) - 10} more" if len(columns) > 10 else ""
        )
        raise ConfigError(
            f"{_SETTING}.dataPath",
            f"{int(bad.any(axis=1).sum())} of {len(x)} rows hold values that are not finite numbers "
            f"(NaN, empty, infinite or beyond float32's range) in column(s) {shown}; drop or fill them",
        )


def scaler_variance(mean: np.ndarray, variance: np.ndarray, rows: int) -> np.ndarray:
    """The variance the model's scaler divides by, for both data paths: StandardScaler's scale_**2.

    A constant column's is 1 (not its variance, or the Normalization layer would divide by its epsilon and
    turn a serving value 1 away from the constant into 1e7). Constant by scikit-learn's own rule
    (StandardScaler's _is_constant_feature and _handle_zeros_in_scale): a variance within float64 rounding of
    0 for this mean and row count, since a constant's variance summed in chunks (sharding: files) is ~1e-25.
    """
    eps = np.finfo(np.float64).eps
    bound = rows * eps * variance + (rows * mean * eps) ** 2
    constant = (variance <= bound) | (np.sqrt(variance) < 10 * eps)
    return np.where(constant, 1.0, variance)


def load_split(cfg: TrainerConfig, num_workers: int = 1) -> Split:
    """The seed's split (train_test_split with random_state=seed), identical on every worker."""
    from sklearn.model_selection import train_test_split

    x, y, names = load_features(cfg)
    check_finite(x, names)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=cfg.testSize, random_state=cfg.seed)
    if len(x_train) < cfg.globalBatchSize:
        raise ConfigError(
            f"{_SETTING}.globalBatchSize",
            f"is larger than the {len(x_train)} training rows, so not one full batch exists",
        )
    mean = x_train.mean(axis=0)
    return Split(
        x_train=x_train.astype(np.float32),
        y_train=y_train.astype(np.float32),
        x_test=x_test.astype(np.float32),
        y_test=y_test.astype(np.float32),
        feature_names=names,
        mean=mean,
        variance=scaler_variance(mean, x_train.var(axis=0), len(x_train)),
    )


def steps_per_epoch(num_rows: int, global_batch: int) -> int:
    return num_rows // global_batch


def epoch_batches(num_rows: int, global_batch: int, seed: int, epoch: int) -> np.ndarray:
    """Row indices of one epoch's global batches: shape (steps, global_batch).

    Epoch k's order comes from (seed, k) alone, so a fit resumed at epoch k sees exactly the batches the
    undisturbed fit saw from there.
    """
    steps = steps_per_epoch(num_rows, global_batch)
    order = np.random.default_rng([seed, epoch]).permutation(num_rows)[: steps * global_batch]
    return order.reshape(steps, global_batch)


def epoch_order(num_rows: int, global_batch: int, seed: int, epochs: range) -> np.ndarray:
    """Row indices of every global batch of `epochs`: shape (len(epochs) * steps, global_batch)."""
    orders = [epoch_batches(num_rows, global_batch, seed, epoch) for epoch in epochs]
    return np.concatenate(orders) if orders else np.zeros((0, global_batch), dtype=np.int64)


def worker_slice(global_batch: int, num_workers: int, rank: int) -> slice:
    """Which rows of a global batch a worker trains on (tf.distribute's contiguous per-replica split)."""
    per_worker = global_batch // num_workers
    return slice(rank * per_worker, (rank + 1) * per_worker)


def train_dataset(split: Split, cfg: TrainerConfig, first_epoch: int = 0) -> Any:
    """A tf.data pipeline of the global batches from `first_epoch` on (where a resumed fit starts); the
    strategy hands each worker its contiguous slice of each."""
    tf = tensorflow()
    rows, batch = len(split.x_train), cfg.globalBatchSize
    steps = steps_per_epoch(rows, batch)

    def batches_of(epoch: Any) -> Any:
        # Each epoch's order is built when fit reaches that epoch, not every epoch's before the first step.
        order = tf.numpy_function(lambda e: epoch_batches(rows, batch, cfg.seed, int(e)), [epoch], tf.int64)
        return tf.data.Dataset.from_tensor_slices(tf.ensure_shape(order, [steps, batch]))

    x, y = tf.constant(split.x_train), tf.constant(split.y_train)
    dataset = (
        tf.data.Dataset.range(first_epoch, cfg.epochs)
        .flat_map(batches_of)
        .map(lambda idx: (tf.gather(x, idx), tf.gather(y, idx)))
    )
    options = tf.data.Options()
    # DATA: every worker reads the same batches and keeps its slice (no input files to shard by).
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # Infinite, so tf.distribute does not all-reduce a "does any worker still have data" flag every step; fit
    # takes exactly steps_per_epoch batches per epoch, so the repeat is never read.
    return dataset.repeat().with_options(options)
