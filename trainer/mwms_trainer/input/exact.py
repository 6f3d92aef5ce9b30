"""`sharding: exact`: every worker holds every row, and N workers train exactly the model one worker
trains: each takes its equal slice of every full global batch (docs/design/exact-batches.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mwms_contract import names
from mwms_trainer.errors import ConfigError
from mwms_trainer.input.readers import check_finite, read_file, table_files, table_rows
from mwms_trainer.input.scaler import Agreed, scaler_variance
from mwms_trainer.tfenv import tensorflow
from mwms_trainer.trainer_config import TrainerConfig

_SETTING = names.ENV_TRAINER_CONFIG


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


def _read_table(cfg: TrainerConfig) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    import pandas as pd  # heavy: loaded only for a csv/parquet dataset

    path = cfg.dataPath or ""
    frames = [frame for file in table_files(path, cfg.dataset) for frame in read_file(file, cfg.dataset)]
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    return table_rows(frame, cfg, path)


def load_features(
    cfg: TrainerConfig,
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Rows, labels and feature names."""
    if cfg.dataset == "breast_cancer":
        from sklearn.datasets import load_breast_cancer  # heavy: seconds, not paid by train.params_of

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


def load_split(cfg: TrainerConfig) -> Split:
    """The seed's split (train_test_split with random_state=seed), identical on every worker."""
    from sklearn.model_selection import train_test_split

    x, y, feature_names = load_features(cfg)
    check_finite(x, feature_names)
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
        feature_names=feature_names,
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


def train_dataset(split: Split, cfg: TrainerConfig, first_epoch: int = 0, first_step: int = 0) -> Any:
    """A tf.data pipeline of the global batches from step `first_step` of `first_epoch` on (where a resumed
    fit starts); the strategy hands each worker its contiguous slice of each."""
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
        .skip(first_step)  # the batches' row indices only: the rows themselves are gathered after
        .map(lambda idx: (tf.gather(x, idx), tf.gather(y, idx)))
    )
    options = tf.data.Options()
    # DATA: every worker reads the same batches and keeps its slice (no input files to shard by).
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # Infinite, so tf.distribute does not all-reduce a "does any worker still have data" flag every step; fit
    # takes exactly steps_per_epoch batches per epoch, so the repeat is never read.
    return dataset.repeat().with_options(options)


@dataclass(frozen=True)
class ExactInput:
    """`sharding: exact` as a TrainingInput (input/__init__.py): the split, held whole on every worker."""

    cfg: TrainerConfig
    split: Split

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.split.feature_names

    @property
    def num_features(self) -> int:
        return self.split.num_features

    def _steps(self) -> int:
        return steps_per_epoch(len(self.split.x_train), self.cfg.globalBatchSize)

    def sizes(self) -> dict[str, Any]:
        return {
            "stepsPerEpoch": self._steps(),
            "trainRows": len(self.split.x_train),
            "testRows": len(self.split.x_test),
        }

    def agree(self, strategy: Any) -> Agreed:
        """Nothing to exchange: every worker computed the same split and scaler."""
        return Agreed(self.split.mean, self.split.variance, self._steps(), {})

    def dataset(self, strategy: Any, steps: int, first_epoch: int, first_step: int = 0) -> Any:
        return train_dataset(self.split, self.cfg, first_epoch, first_step)

    def held_out(self) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        return [(self.split.x_test, self.split.y_test)]


def prepare(cfg: TrainerConfig, num_workers: int, rank: int) -> ExactInput:
    """Every row, split as the seed splits it; the same on every worker (so the group size plays no part)."""
    return ExactInput(cfg, load_split(cfg))
