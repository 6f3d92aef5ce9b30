"""input/files.py without TensorFlow: which files a worker reads, the combined scaler, equal steps, order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.preprocessing import StandardScaler

from mwms_trainer.errors import ConfigError
from mwms_trainer.input import files as file_sharding
from mwms_trainer.trainer_config import parse_trainer_config


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
        shard = file_sharding.plan(files(n_files), test_size, workers, rank)
        assert shard.files == tuple(files(n_files)[i] for i in expected)
        assert (shard.stride, shard.offset) == (stride, rank if stride > 1 else 0)
        assert shard.validation_files == tuple(files(n_files)[i] for i in held_out)
        assert shard.training_files == n_files - len(held_out)


def test_one_file_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="at least 2 files") as err:
        file_sharding.plan(files(1), 0.3, 2, 0)
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
    return parse_trainer_config(
        json.dumps({"dataset": "parquet", "dataPath": str(path), "sharding": "files", **extra}), 2
    )


@pytest.mark.parametrize("parts", [5, 2])  # 4 training files for 2 workers; 1 file: every other row
def test_the_combined_scaler_is_the_scaler_of_all_training_rows(tmp_path, parts):
    frames = write_table(tmp_path / "t", parts, 1000)
    cfg = config(tmp_path / "t", testSize=0.2)
    shards = [file_sharding.prepare(cfg, 2, rank) for rank in (0, 1)]
    training = pd.concat(frames[:-1]).drop(columns=["label"]).to_numpy()
    assert sum(s.own.rows for s in shards) == len(training)
    mean, variance = file_sharding.scaler([s.own for s in shards])
    np.testing.assert_allclose(mean, training.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(variance, training.var(axis=0), rtol=1e-9)


def test_a_constant_column_is_scaled_by_1():
    every = [file_sharding.Stats(3, np.array([2.0, 1.0]), np.array([0.0, 6.0]))]
    _, variance = file_sharding.scaler(every)
    np.testing.assert_array_equal(variance, [1.0, 2.0])


def chunk_stats(x):
    mean = x.mean(axis=0)
    return file_sharding.Stats(len(x), mean, ((x - mean) ** 2).sum(axis=0))


def test_a_constant_column_read_in_uneven_chunks_is_scaled_by_1_as_on_the_exact_path():
    """The chunks' means differ from 2024.3 by rounding, so their combined variance is ~1e-25, not 0."""
    rng = np.random.default_rng(3)
    chunks = [np.column_stack([np.full(n, 2024.3), rng.normal(size=n)]) for n in (400, 250, 370, 310)]
    every = [chunk_stats(chunks[0]).combine(chunk_stats(chunks[2])), chunk_stats(chunks[1])]
    every.append(chunk_stats(chunks[3]))
    assert every[0].combine(every[1]).combine(every[2]).m2[0] > 0  # what the old zero test missed
    mean, variance = file_sharding.scaler(every)
    rows = np.concatenate(chunks)
    scaler = StandardScaler().fit(rows)
    assert variance[0] == 1.0 == scaler.scale_[0]
    np.testing.assert_allclose(np.sqrt(variance), scaler.scale_, rtol=1e-12)
    np.testing.assert_allclose(mean, scaler.mean_, rtol=1e-12)


def test_columns_are_read_by_name_so_each_files_order_does_not_matter(tmp_path):
    """Worker 1's files and the held-out file hold the columns in another order: the same table."""
    frames = write_table(tmp_path / "t", 5, 200)
    ordered = [file_sharding.prepare(config(tmp_path / "t", testSize=0.2), 2, rank) for rank in (0, 1)]
    for part in (1, 3, 4):
        frames[part][["label", "f2", "f0", "f1"]].to_parquet(tmp_path / "t" / f"part-{part:03d}.parquet")
    cfg = config(tmp_path / "t", testSize=0.2)
    shuffled = [file_sharding.prepare(cfg, 2, rank) for rank in (0, 1)]
    assert [s.feature_names for s in shuffled] == [("f0", "f1", "f2")] * 2
    for a, b in zip(ordered, shuffled, strict=True):
        np.testing.assert_array_equal(a.own.mean, b.own.mean)
        np.testing.assert_array_equal(a.own.m2, b.own.m2)
    training = pd.concat(frames[:-1])[["f0", "f1", "f2"]].to_numpy()
    np.testing.assert_allclose(file_sharding.scaler([s.own for s in shuffled])[0], training.mean(axis=0))
    held_out = np.concatenate([x for x, _ in file_sharding.held_out_rows(shuffled[0])])
    np.testing.assert_array_equal(held_out, frames[4][["f0", "f1", "f2"]].to_numpy())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.astype({"f1": "int64"}), r"column 'f1' is long in '\S*part-003.parquet' but double in "),
        (lambda f: f.drop(columns=["f2"]), r"'\S*part-003.parquet' has no column 'f2', which '\S*part-001"),
        (lambda f: f.assign(extra=1.0), r"'\S*part-003.parquet' has a column 'extra', which '\S*part-001"),
    ],
)
def test_a_file_with_other_columns_or_types_exits_2_naming_it_and_the_column(tmp_path, change, message):
    frames = write_table(tmp_path / "t", 5, 50)
    change(frames[3]).to_parquet(tmp_path / "t" / "part-003.parquet")
    cfg = config(tmp_path / "t", testSize=0.2)
    with pytest.raises(ConfigError, match=message + r".*same columns of the same types") as err:
        file_sharding.prepare(cfg, 2, 1)  # worker 1: files 1 and 3
    assert err.value.setting == "MWMS_TRAINER_CONFIG.dataPath"
    file_sharding.prepare(cfg, 2, 0)  # worker 0 never opens file 3; the workers' exchange compares the two


def test_csv_columns_are_read_by_name_and_declared_double(tmp_path):
    directory = tmp_path / "t"
    directory.mkdir()
    (directory / "a.csv").write_text("\n".join(["n,x,label"] + [f"{i},{i / 3},{i % 2}" for i in range(40)]))
    (directory / "b.csv").write_text("\n".join(["label,x,n"] + [f"{i % 2},{i / 3},{i}" for i in range(40)]))
    (directory / "c.csv").write_text("\n".join(["x,n,label"] + [f"{i / 3},{i},{i % 2}" for i in range(40)]))
    raw = {"dataset": "csv", "dataPath": str(directory), "sharding": "files", "testSize": 0.3}
    shards = file_sharding.prepare(parse_trainer_config(json.dumps(raw), 1), 1, 0)
    assert shards.feature_names == ("n", "x")
    np.testing.assert_allclose(shards.own.mean, [19.5, 6.5])
    assert shards.held_out_rows == 40


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda f: f.assign(f2=f["f2"].where(f.index != 7)), r"part-004.parquet': 1 of 50 rows .* 'f2'"),
        (
            lambda f: f.assign(f0=f["f0"].where(f.index != 7, 1e39)),
            r"part-004.parquet': 1 of 50 rows .* 'f0'",
        ),
        (lambda f: f.assign(label=f["label"] + 1), r"'label' must hold 0/1 labels"),
    ],
)
def test_the_chief_checks_the_held_out_files_before_the_fit(tmp_path, bad, message):
    frames = write_table(tmp_path / "t", 5, 50)
    bad(frames[4]).to_parquet(tmp_path / "t" / "part-004.parquet")
    cfg = config(tmp_path / "t", testSize=0.2)
    with pytest.raises(ConfigError, match=message):
        file_sharding.prepare(cfg, 2, 0)
    assert file_sharding.prepare(cfg, 2, 1).held_out_rows == 0  # the others never open the held-out files


def test_the_rows_each_epoch_leaves_out_are_each_workers_rows_past_the_common_steps():
    stats = [file_sharding.Stats(n, np.zeros(1), np.zeros(1)) for n in (800, 650)]
    cfg = config("x", globalBatchSize=32)
    steps = file_sharding.steps_per_epoch(stats, cfg)
    assert file_sharding.rows_left_out(stats, steps, cfg) == [800 - 40 * 16, 650 - 40 * 16]


def test_steps_are_the_fewest_full_batches_of_any_worker():
    stats = [file_sharding.Stats(n, np.zeros(1), np.zeros(1)) for n in (800, 650)]
    assert file_sharding.steps_per_epoch(stats, config("x", globalBatchSize=32)) == 650 // 16
    with pytest.raises(ConfigError, match="only 650 training rows") as err:
        file_sharding.steps_per_epoch(stats, config("x", globalBatchSize=2000))
    assert err.value.setting == "MWMS_TRAINER_CONFIG.globalBatchSize"


def test_batches_take_each_epoch_from_seed_and_epoch_and_only_own_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(file_sharding, "SHUFFLE_ROWS", 300)  # several shuffle buffers per epoch
    frames = write_table(tmp_path / "t", 5, 250)
    cfg = config(tmp_path / "t", testSize=0.2, epochs=3, seed=5)
    shards = file_sharding.prepare(cfg, 2, 1)  # files 1 and 3
    own = {tuple(r) for f in (frames[1], frames[3]) for r in f.drop(columns=["label"]).to_numpy(np.float32)}
    run = list(file_sharding.batches(shards, 1, 16, 31, 0))
    assert len(run) == 3 * 31 and all(x.shape == (16, 3) and y.shape == (16,) for x, y in run)
    epochs = [np.concatenate([x for x, _ in run[k * 31 : (k + 1) * 31]]) for k in range(3)]
    for rows in epochs:
        assert len({tuple(r) for r in rows}) == len(rows) and {tuple(r) for r in rows} <= own
    assert not np.array_equal(epochs[0], epochs[1])  # a new order each epoch
    resumed = list(file_sharding.batches(shards, 1, 16, 31, 2))  # a fit resumed at epoch 2 replays its order
    np.testing.assert_array_equal(np.concatenate([x for x, _ in resumed]), epochs[2])


def test_bad_rows_in_a_workers_file_exit_2_naming_the_file(tmp_path):
    frames = write_table(tmp_path / "t", 3, 50)
    frames[1].loc[3, "f2"] = np.nan
    frames[1].to_parquet(tmp_path / "t" / "part-001.parquet")
    with pytest.raises(ConfigError, match=r"part-001.parquet': 1 of 50 rows .* column\(s\) 'f2'"):
        file_sharding.prepare(config(tmp_path / "t", testSize=0.3), 2, 1)
    file_sharding.prepare(config(tmp_path / "t", testSize=0.3), 2, 0)  # worker 0 never reads file 1
