"""The large-data path (`sharding: files`): each worker streams only its own files from disk.

For csv/parquet data larger than a worker's memory. Not N workers == 1 worker exact (data.py is): each worker
trains on its own rows, so the batches depend on the number of workers.

- Split: the last round(testSize * files) files (at least one) in name order are held out; the chief alone
  reads them, after the fit, to compute the held-out metrics. The other files are for training.
- Shards: with at least as many training files as workers, training file i goes to worker i mod N and no
  worker opens another worker's files. With fewer, every worker streams all training files and keeps every
  N-th row (row i to worker i mod N).
- Scaler: each worker counts its rows and computes their mean and squared deviations in one streaming pass
  (before any peer is waited for, so bad data exits 2 early); one all-reduce then gathers every worker's
  statistics, and every worker combines them in rank order: the mean and variance of all training rows,
  identical on every worker.
- Steps per epoch: the fewest full per-worker batches any worker holds, so every worker takes the same number
  of steps and none waits in a collective for a peer that ran out of rows.
- Order: epoch k reads the files in an order drawn from (seed, k) and shuffles rows within a buffer of
  SHUFFLE_ROWS rows drawn from (seed, k, worker); a resumed fit replays epoch k's order. Rows flow from a
  Python generator through tf.data, never into the graph as constants.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mwms_trainer import data
from mwms_trainer.config import TrainerConfig
from mwms_trainer.errors import ConfigError
from mwms_trainer.tfenv import tensorflow

log = logging.getLogger("mwms_trainer")

CHUNK_ROWS = 65536  # rows per read from disk
SHUFFLE_ROWS = 262144  # rows shuffled together (about 32 MiB for 32 float32 features)
_SETTING = "MWMS_TRAINER_CONFIG"


@dataclass(frozen=True)
class Shard:
    """What one worker reads: its training files (rows row_offset, row_offset + stride, ...) and, for the
    chief, the held-out files."""

    files: tuple[Path, ...]
    stride: int
    offset: int
    validation_files: tuple[Path, ...]
    training_files: int  # of all workers together


@dataclass(frozen=True)
class Stats:
    """Row count, mean and summed squared deviations of a set of rows (float64), combinable (Chan et al.)."""

    rows: int
    mean: np.ndarray
    m2: np.ndarray

    def combine(self, other: Stats) -> Stats:
        rows = self.rows + other.rows
        if rows == 0:
            return self
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.rows / rows)
        m2 = self.m2 + other.m2 + delta**2 * (self.rows * other.rows / rows)
        return Stats(rows, mean, m2)


@dataclass(frozen=True)
class FileShards:
    """This worker's part of a file-sharded table, known before any peer is waited for."""

    cfg: TrainerConfig
    shard: Shard
    own: Stats
    feature_names: tuple[str, ...]
    column_types: tuple[str, ...]

    @property
    def num_features(self) -> int:
        return len(self.feature_names)


def plan(files: list[Path], test_size: float, num_workers: int, rank: int) -> Shard:
    """Which files this worker trains on and which the chief holds out (see the module's docstring)."""
    if len(files) < 2:
        raise ConfigError(
            f"{_SETTING}.dataPath",
            f"sharding files holds out whole files, so it needs at least 2 files; got {len(files)}",
        )
    held_out = min(len(files) - 1, max(1, round(test_size * len(files))))
    train, validation = files[:-held_out], files[-held_out:]
    if len(train) >= num_workers:
        return Shard(tuple(train[rank::num_workers]), 1, 0, tuple(validation), len(train))
    return Shard(tuple(train), num_workers, rank, tuple(validation), len(train))


def _rows(
    files: tuple[Path, ...], cfg: TrainerConfig, stride: int = 1, offset: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray, tuple[str, ...], tuple[str, ...]]]:
    """Checked chunks of rows (x float64, y, names, types) of `files` in that order; with a stride, only rows
    offset, offset + stride, ... counted across the files."""
    seen = 0
    names: tuple[str, ...] | None = None
    for file in files:
        for frame in data.read_file(file, cfg.dataset, CHUNK_ROWS):
            x, y, chunk_names, types = data.table_rows(frame, cfg, str(file))
            if names is not None and chunk_names != names:
                raise ConfigError(
                    f"{_SETTING}.dataPath", f"{str(file)!r} has columns {chunk_names}, the others {names}"
                )
            names = chunk_names
            keep = slice((offset - seen) % stride, None, stride)
            seen += len(x)
            x, y = x[keep], y[keep]
            if len(x):
                try:
                    data.check_finite(x, names)
                except ConfigError as e:
                    raise ConfigError(e.setting, f"{str(file)!r}: {str(e).split(': ', 1)[1]}") from None
                yield x, y, names, types


def prepare(cfg: TrainerConfig, num_workers: int, rank: int) -> FileShards:
    """Plan this worker's shard and scan it once (checks and statistics), before any peer is waited for."""
    files = data.table_files(cfg.dataPath or "", cfg.dataset)
    shard = plan(files, cfg.testSize, num_workers, rank)
    stats: Stats | None = None
    columns: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    for x, _, names, types in _rows(shard.files, cfg, shard.stride, shard.offset):
        mean = x.mean(axis=0)
        chunk = Stats(len(x), mean, ((x - mean) ** 2).sum(axis=0))
        stats = chunk if stats is None else stats.combine(chunk)
        columns = (names, types)
    if stats is None:
        where = list(map(str, shard.files))
        raise ConfigError(f"{_SETTING}.dataPath", f"worker {rank}'s files {where} hold no rows")
    log.info(
        "worker %d reads %d of %d files (%d training rows%s)",
        rank,
        len(shard.files),
        len(files),
        stats.rows,
        f", the rows i with i mod {shard.stride} = {shard.offset}" if shard.stride > 1 else "",
    )
    return FileShards(cfg, shard, stats, *columns)


def gather_stats(strategy: Any, own: Stats, num_workers: int, rank: int) -> list[Stats]:
    """Every worker's statistics, on every worker: one all-reduce of a vector where each writes its slot."""
    tf = tensorflow()
    width = 1 + 2 * len(own.mean)
    slots = np.zeros((num_workers, width))
    slots[rank] = np.concatenate([[own.rows], own.mean, own.m2])
    value = strategy.experimental_distribute_values_from_function(lambda _: tf.constant(slots))
    summed = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None).numpy()
    features = len(own.mean)
    return [Stats(int(round(s[0])), s[1 : 1 + features], s[1 + features :]) for s in summed]


def scaler(every: list[Stats]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of all training rows; a constant column's variance is 1 (StandardScaler's scale)."""
    total = every[0]
    for s in every[1:]:
        total = total.combine(s)
    variance = total.m2 / total.rows
    return total.mean, np.where(np.sqrt(variance) < 10 * np.finfo(np.float64).eps, 1.0, variance)


def steps_per_epoch(every: list[Stats], cfg: TrainerConfig) -> int:
    per_worker = cfg.globalBatchSize // len(every)
    steps = min(s.rows for s in every) // per_worker
    if steps < 1:
        raise ConfigError(
            f"{_SETTING}.globalBatchSize",
            f"a worker holds only {min(s.rows for s in every)} training rows, not one batch of {per_worker}",
        )
    return steps


def _shuffled(xs: list[np.ndarray], ys: list[np.ndarray], rng: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.concatenate(xs), np.concatenate(ys)
    order = rng.permutation(len(x))
    return x[order], y[order]


def _cut(x: np.ndarray, y: np.ndarray, size: int, count: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for i in range(count):
        yield x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]


def batches(
    shards: FileShards, rank: int, per_worker: int, steps: int, first_epoch: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """This worker's batches, `steps` per epoch, from `first_epoch` on, streamed from its files."""
    cfg, shard = shards.cfg, shards.shard
    for epoch in range(first_epoch, cfg.epochs):
        # The file order is the same on every worker, so every-N-th-row shards stay a partition.
        order = np.random.default_rng([cfg.seed, epoch]).permutation(len(shard.files))
        rng = np.random.default_rng([cfg.seed, epoch, rank])
        left = steps
        held_x: list[np.ndarray] = []
        held_y: list[np.ndarray] = []
        for x, y, _, _ in _rows(tuple(shard.files[i] for i in order), cfg, shard.stride, shard.offset):
            held_x.append(x.astype(np.float32))
            held_y.append(y.astype(np.float32))
            if sum(map(len, held_x)) < SHUFFLE_ROWS:
                continue
            bx, by = _shuffled(held_x, held_y, rng)
            full = min(len(bx) // per_worker, left)
            yield from _cut(bx, by, per_worker, full)
            left -= full
            if left == 0:
                break  # the rest of this epoch's rows wait for the next epoch's order
            held_x, held_y = [bx[full * per_worker :]], [by[full * per_worker :]]
        else:
            if held_x:
                bx, by = _shuffled(held_x, held_y, rng)
                yield from _cut(bx, by, per_worker, min(len(bx) // per_worker, left))


def train_dataset(strategy: Any, shards: FileShards, rank: int, steps: int, first_epoch: int) -> Any:
    """The per-worker dataset, handed to the strategy as is (distribute_datasets_from_function: no
    auto-sharding, no splitting of a global batch): each worker yields its own per-worker batches."""
    tf = tensorflow()

    def dataset_fn(context: Any) -> Any:
        per_worker = context.get_per_replica_batch_size(shards.cfg.globalBatchSize)
        dataset = tf.data.Dataset.from_generator(
            lambda: batches(shards, rank, per_worker, steps, first_epoch),
            output_signature=(
                tf.TensorSpec([per_worker, shards.num_features], tf.float32),
                tf.TensorSpec([per_worker], tf.float32),
            ),
        )
        # Infinite, as data.train_dataset, so no "still has data" all-reduce per step; fit takes `steps`.
        return dataset.repeat().prefetch(2)

    return strategy.distribute_datasets_from_function(dataset_fn)


def held_out_rows(shards: FileShards) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The held-out files' rows, streamed in chunks (for model.held_out_metrics on the chief)."""
    for x, y, _, _ in _rows(shards.shard.validation_files, shards.cfg):
        yield x, y
