"""streaming.py without TensorFlow: which files a worker reads, the combined scaler, equal steps, order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mwms_trainer import streaming
from mwms_trainer.config import parse_trainer_config
from mwms_trainer.errors import ConfigError


def files(n):
    return [Path(f"part-{i}") for i in range(n)]


@pytest.mark.parametrize(
    ("n_files", "workers", "test_size", "own", "stride", "held_out"),
    [
        (5, 2, 0.2, {0: [0, 2], 1: [1, 3]}, 1, [4]),
        (10, 3, 0.3, {0: [0, 3, 6], 1: [1, 4], 2: [2, 5]}, 1, [7, 8, 9]),
        (3, 4, 0.3, {0: [0, 1], 3: [0, 1]}, 4, [2]),  # fewer training files than workers: every 4th row
        (2, 1, 0.9, {0: [0]}, 1, [1]),  # always one training file
    ],
)
def test_plan_gives_file_i_to_worker_i_mod_n_and_holds_out_the_last(
    n_files, workers, test_size, own, stride, held_out
):
    for rank, expected in own.items():
        shard = streaming.plan(files(n_files), test_size, workers, rank)
        assert shard.files == tuple(files(n_files)[i] for i in expected)
        assert (shard.stride, shard.offset) == (stride, rank if stride > 1 else 0)
        assert shard.validation_files == tuple(files(n_files)[i] for i in held_out)
        assert shard.training_files == n_files - len(held_out)


def test_one_file_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="at least 2 files") as err:
        streaming.plan(files(1), 0.3, 2, 0)
    assert err.value.setting == "MWMS_TRAINER_CONFIG.dataPath"


def write_table(directory, parts, rows, features=3, seed=0):
    directory.mkdir()
    rng = np.random.default_rng(seed)
    frames = []
    for part in range(parts):
        x = rng.normal(size=(rows, features)) * np.arange(1, features + 1) + 10
        frame = pd.DataFrame({f"f{j}": x[:, j] for j in range(features)})
        frame["label"] = (x[:, 0] > 10).astype(int)
        frame.to_parquet(directory / f"part-{part:03d}.parquet")
        frames.append(frame)
    return frames


def config(path, **extra):
    import json

    return parse_trainer_config(
        json.dumps({"dataset": "parquet", "dataPath": str(path), "sharding": "files", **extra}), 2
    )


@pytest.mark.parametrize("parts", [5, 2])  # 4 training files for 2 workers; 1 file: every other row
def test_the_combined_scaler_is_the_scaler_of_all_training_rows(tmp_path, parts):
    frames = write_table(tmp_path / "t", parts, 1000)
    cfg = config(tmp_path / "t", testSize=0.2)
    shards = [streaming.prepare(cfg, 2, rank) for rank in (0, 1)]
    training = pd.concat(frames[:-1]).drop(columns=["label"]).to_numpy()
    assert sum(s.own.rows for s in shards) == len(training)
    mean, variance = streaming.scaler([s.own for s in shards])
    np.testing.assert_allclose(mean, training.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(variance, training.var(axis=0), rtol=1e-9)


def test_a_constant_column_is_scaled_by_1():
    every = [streaming.Stats(3, np.array([2.0, 1.0]), np.array([0.0, 6.0]))]
    _, variance = streaming.scaler(every)
    np.testing.assert_array_equal(variance, [1.0, 2.0])


def test_steps_are_the_fewest_full_batches_of_any_worker():
    stats = [streaming.Stats(n, np.zeros(1), np.zeros(1)) for n in (800, 650)]
    assert streaming.steps_per_epoch(stats, config("x", globalBatchSize=32)) == 650 // 16
    with pytest.raises(ConfigError, match="only 650 training rows") as err:
        streaming.steps_per_epoch(stats, config("x", globalBatchSize=2000))
    assert err.value.setting == "MWMS_TRAINER_CONFIG.globalBatchSize"


def test_batches_take_each_epoch_from_seed_and_epoch_and_only_own_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "SHUFFLE_ROWS", 300)  # several shuffle buffers per epoch
    frames = write_table(tmp_path / "t", 5, 250)
    cfg = config(tmp_path / "t", testSize=0.2, epochs=3, seed=5)
    shards = streaming.prepare(cfg, 2, 1)  # files 1 and 3
    own = {tuple(r) for f in (frames[1], frames[3]) for r in f.drop(columns=["label"]).to_numpy(np.float32)}
    run = list(streaming.batches(shards, 1, 16, 31, 0))
    assert len(run) == 3 * 31 and all(x.shape == (16, 3) and y.shape == (16,) for x, y in run)
    epochs = [np.concatenate([x for x, _ in run[k * 31 : (k + 1) * 31]]) for k in range(3)]
    for rows in epochs:
        assert len({tuple(r) for r in rows}) == len(rows) and {tuple(r) for r in rows} <= own
    assert not np.array_equal(epochs[0], epochs[1])  # a new order each epoch
    resumed = list(streaming.batches(shards, 1, 16, 31, 2))  # a fit resumed at epoch 2 replays its order
    np.testing.assert_array_equal(np.concatenate([x for x, _ in resumed]), epochs[2])


def test_bad_rows_in_a_workers_file_exit_2_naming_the_file(tmp_path):
    frames = write_table(tmp_path / "t", 3, 50)
    frames[1].loc[3, "f2"] = np.nan
    frames[1].to_parquet(tmp_path / "t" / "part-001.parquet")
    with pytest.raises(ConfigError, match=r"part-001.parquet': 1 of 50 rows .* column\(s\) 'f2'"):
        streaming.prepare(config(tmp_path / "t", testSize=0.3), 2, 1)
    streaming.prepare(config(tmp_path / "t", testSize=0.3), 2, 0)  # worker 0 never reads file 1
