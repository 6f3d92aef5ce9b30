"""`sharding: files`: each worker streams only its own csv/parquet files, for data larger than its
memory; not N workers == 1 worker. The rules: docs/trainer.md; why: docs/design/file-sharding.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from mwms_contract import names
from mwms_trainer.errors import ConfigError
from mwms_trainer.input.readers import (
    DataFile,
    check_finite,
    file_columns,
    read_file,
    table_files,
    table_rows,
)
from mwms_trainer.input.scaler import Agreed, scaler_variance
from mwms_trainer.tfenv import tensorflow
from mwms_trainer.trainer_config import TrainerConfig

log = logging.getLogger("mwms_trainer")

CHUNK_ROWS = 65536  # rows per read from disk
SHUFFLE_ROWS = 262144  # rows shuffled together (about 32 MiB for 32 float32 features)
_SETTING = names.ENV_TRAINER_CONFIG


@dataclass(frozen=True)
class Shard:
    """What one worker reads: its training files (rows row_offset, row_offset + stride, ...) and, for the
    chief, the held-out files."""

    files: tuple[DataFile, ...]
    stride: int
    offset: int
    validation_files: tuple[DataFile, ...]
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
class Columns:
    """A table's columns and their MLflow types as one file (`file`) holds them: what every file must hold."""

    file: str
    types: dict[str, str]

    def features(self, label: str) -> tuple[str, ...]:
        """The model's features: every column but the label, in name order (the one order every worker knows
        without reading another worker's files)."""
        return tuple(sorted(name for name in self.types if name != label))

    def check(self, file: str, types: dict[str, str]) -> None:
        """Exit 2 naming the file and the column unless `types` are this file's columns and types."""
        for name in sorted(self.types.keys() | types.keys()):
            if name not in types:
                wrong = f"{file!r} has no column {name!r}, which {self.file!r} has"
            elif name not in self.types:
                wrong = f"{file!r} has a column {name!r}, which {self.file!r} has not"
            elif types[name] != self.types[name]:
                wrong = (
                    f"column {name!r} is {types[name]} in {file!r} but {self.types[name]} in {self.file!r}"
                )
            else:
                continue
            raise ConfigError(
                f"{_SETTING}.dataPath",
                f"{wrong}: every file of a table must hold the same columns of the same types (in any order)",
            )


@dataclass(frozen=True)
class FileShards:
    """`sharding: files` as a TrainingInput (input/__init__.py): this worker's part of a file-sharded table,
    known before any peer is waited for."""

    cfg: TrainerConfig
    shard: Shard
    own: Stats
    columns: Columns  # this worker's first training file's
    held_out_rows: int  # on the chief; 0 elsewhere
    num_workers: int
    rank: int

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.columns.features(self.cfg.labelColumn)

    @property
    def num_features(self) -> int:
        return len(self.feature_names)

    def sizes(self) -> dict[str, Any]:
        """The training row counts are known only once the workers have met (agree logs them)."""
        return {
            "trainFiles": self.shard.training_files,
            "heldOutFiles": len(self.shard.validation_files),
            "testRows": self.held_out_rows,
        }

    def agree(self, strategy: Any) -> Agreed:
        """Every worker's statistics, gathered in a collective: the scaler of all rows and equal steps."""
        every = gather_stats(strategy, self, self.num_workers, self.rank)
        mean, variance = scaler(every)
        steps = steps_per_epoch(every, self.cfg)
        left_out = rows_left_out(every, steps, self.cfg)
        log.info(
            "worker %d: %d training rows on %d workers, %d steps per epoch; each epoch leaves out %d rows "
            "(per worker: %s), as every worker takes the steps of the one with the fewest rows",
            self.rank,
            sum(s.rows for s in every),
            len(every),
            steps,
            sum(left_out),
            ", ".join(map(str, left_out)),
        )
        params = {
            "trainRows": sum(s.rows for s in every),
            "stepsPerEpoch": steps,
            "rowsLeftOutPerEpoch": sum(left_out),
        }
        return Agreed(mean, variance, steps, params)

    def dataset(self, strategy: Any, steps: int, first_epoch: int, first_step: int = 0) -> Any:
        return train_dataset(strategy, self, self.rank, steps, first_epoch, first_step)

    def held_out(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return held_out_rows(self)


def plan(files: list[DataFile], test_size: float, num_workers: int, rank: int) -> Shard:
    """Which files this worker trains on and which the chief holds out: training file i goes to worker i mod N
    (with fewer training files than workers, each takes every N-th row of them all); the last
    round(testSize * files) files, at least one, are held out."""
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
    files: tuple[DataFile, ...], columns: Columns, cfg: TrainerConfig, stride: int = 1, offset: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Checked chunks of rows (x float64 in feature-name order, y) of `files` in that order, each file's
    columns checked against `columns` first; with a stride, only rows offset, offset + stride, ... counted
    across the files."""
    names = columns.features(cfg.labelColumn)
    seen = 0
    for file in files:
        columns.check(str(file), file_columns(file, cfg.dataset))
        for frame in read_file(file, cfg.dataset, CHUNK_ROWS):
            x, y, _ = table_rows(frame[[*names, cfg.labelColumn]], cfg, str(file))
            keep = slice((offset - seen) % stride, None, stride)
            seen += len(x)
            x, y = x[keep], y[keep]
            if len(x):
                try:
                    check_finite(x, names)
                except ConfigError as e:
                    raise ConfigError(e.setting, f"{str(file)!r}: {str(e).split(': ', 1)[1]}") from None
                yield x, y


def first_columns(file: DataFile, cfg: TrainerConfig) -> Columns:
    """The columns of a worker's first training file, which its other files are checked against."""
    columns = Columns(str(file), file_columns(file, cfg.dataset))
    if cfg.labelColumn not in columns.types:
        raise ConfigError(
            f"{_SETTING}.labelColumn",
            f"{cfg.labelColumn!r} is not a column of {str(file)!r}: {sorted(columns.types)}",
        )
    return columns


def prepare(cfg: TrainerConfig, num_workers: int, rank: int) -> FileShards:
    """Plan this worker's shard and scan it once (checks and statistics), before any peer is waited for."""
    files = table_files(cfg.dataPath or "", cfg.dataset)
    shard = plan(files, cfg.testSize, num_workers, rank)
    columns = first_columns(shard.files[0], cfg)
    stats: Stats | None = None
    for x, _ in _rows(shard.files, columns, cfg, shard.stride, shard.offset):
        mean = x.mean(axis=0)
        chunk = Stats(len(x), mean, ((x - mean) ** 2).sum(axis=0))
        stats = chunk if stats is None else stats.combine(chunk)
    if stats is None:
        where = list(map(str, shard.files))
        raise ConfigError(f"{_SETTING}.dataPath", f"worker {rank}'s files {where} hold no rows")
    held_out = 0
    if rank == 0:  # the chief: its held-out files are checked now, not after a whole fit
        held_out = sum(len(y) for _, y in _rows(shard.validation_files, columns, cfg))
        if held_out == 0:
            where = list(map(str, shard.validation_files))
            raise ConfigError(f"{_SETTING}.dataPath", f"the held-out files {where} hold no rows")
    log.info(
        "worker %d reads %d of %d files (%d training rows%s%s)",
        rank,
        len(shard.files),
        len(files),
        stats.rows,
        f", the rows i with i mod {shard.stride} = {shard.offset}" if shard.stride > 1 else "",
        f"; {held_out} held-out rows checked" if rank == 0 else "",
    )
    return FileShards(cfg, shard, stats, columns, held_out, num_workers, rank)


def _gather(strategy: Any, own: np.ndarray, num_workers: int, rank: int) -> np.ndarray:
    """Every worker's vector (one length on all), on every worker: one all-reduce where each fills its row."""
    tf = tensorflow()
    slots = np.zeros((num_workers, len(own)))
    slots[rank] = own
    value = strategy.experimental_distribute_values_from_function(lambda _: tf.constant(slots))
    return np.asarray(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None).numpy())


def _gather_text(strategy: Any, own: str, num_workers: int, rank: int) -> list[str]:
    """Every worker's text, on every worker: its length first, then its bytes padded to the longest."""
    raw = np.frombuffer(own.encode(), dtype=np.uint8)
    lengths = _gather(strategy, np.array([len(raw)], dtype=np.float64), num_workers, rank)[:, 0].astype(int)
    padded = np.zeros(lengths.max())
    padded[: len(raw)] = raw
    rows = _gather(strategy, padded, num_workers, rank).astype(np.uint8)
    return [bytes(row[:n]).decode() for row, n in zip(rows, lengths, strict=True)]


def gather_stats(strategy: Any, shards: FileShards, num_workers: int, rank: int) -> list[Stats]:
    """Every worker's statistics, on every worker, once every worker's columns are known to be the same.

    A worker may open only its own files, so each sends its first file's columns and every worker checks all
    of them against the chief's: a difference exits 2 on every worker with the same message (naming both
    files and the column), and the statistics, whose width is the number of features, are gathered only then.
    """
    own = shards.own
    sent = json.dumps({"file": shards.columns.file, "types": shards.columns.types})
    every_columns = [Columns(**json.loads(text)) for text in _gather_text(strategy, sent, num_workers, rank)]
    for columns in every_columns[1:]:
        every_columns[0].check(columns.file, columns.types)
    summed = _gather(strategy, np.concatenate([[own.rows], own.mean, own.m2]), num_workers, rank)
    features = len(own.mean)
    return [Stats(int(round(s[0])), s[1 : 1 + features], s[1 + features :]) for s in summed]


def scaler(every: list[Stats]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of all training rows, the variance as the exact path's (scaler_variance)."""
    total = every[0]
    for s in every[1:]:
        total = total.combine(s)
    return total.mean, scaler_variance(total.mean, total.m2 / total.rows, total.rows)


def steps_per_epoch(every: list[Stats], cfg: TrainerConfig) -> int:
    per_worker = cfg.globalBatchSize // len(every)
    steps = min(s.rows for s in every) // per_worker
    if steps < 1:
        raise ConfigError(
            f"{_SETTING}.globalBatchSize",
            f"a worker holds only {min(s.rows for s in every)} training rows, not one batch of {per_worker}",
        )
    return steps


def rows_left_out(every: list[Stats], steps: int, cfg: TrainerConfig) -> list[int]:
    """Each worker's training rows that an epoch of `steps` per-worker batches does not reach."""
    per_worker = cfg.globalBatchSize // len(every)
    return [s.rows - steps * per_worker for s in every]


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
    """This worker's batches, `steps` per epoch, from `first_epoch` on, streamed from its files. Epoch k
    reads the files in an order drawn from (seed, k) and shuffles rows within SHUFFLE_ROWS drawn from (seed,
    k, rank), so a resumed fit replays epoch k's batches."""
    cfg, shard = shards.cfg, shards.shard
    for epoch in range(first_epoch, cfg.epochs):
        # The file order is the same on every worker, so every-N-th-row shards stay a partition.
        order = np.random.default_rng([cfg.seed, epoch]).permutation(len(shard.files))
        rng = np.random.default_rng([cfg.seed, epoch, rank])
        left = steps
        held_x: list[np.ndarray] = []
        held_y: list[np.ndarray] = []
        for x, y in _rows(
            tuple(shard.files[i] for i in order), shards.columns, cfg, shard.stride, shard.offset
        ):
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


def train_dataset(
    strategy: Any, shards: FileShards, rank: int, steps: int, first_epoch: int, first_step: int = 0
) -> Any:
    """The per-worker dataset, handed to the strategy as is (distribute_datasets_from_function: no
    auto-sharding, no splitting of a global batch): each worker yields its own per-worker batches, from step
    `first_step` of `first_epoch` on (the epoch's earlier batches are read again, and skipped)."""
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
        # Infinite, as exact.train_dataset, so no "still has data" all-reduce per step; fit takes `steps`.
        return dataset.skip(first_step).repeat().prefetch(2)

    return strategy.distribute_datasets_from_function(dataset_fn)


def held_out_rows(shards: FileShards) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The held-out files' rows, streamed in chunks (for model.held_out_metrics on the chief)."""
    yield from _rows(shards.shard.validation_files, shards.columns, shards.cfg)
