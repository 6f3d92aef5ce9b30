"""input/exact.py without TensorFlow: the seeded split and the batch arithmetic behind N workers == 1."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from mwms_trainer.errors import ConfigError
from mwms_trainer.input.exact import epoch_order, load_split, steps_per_epoch, worker_slice
from mwms_trainer.input.scaler import scaler_variance
from mwms_trainer.trainer_config import TrainerConfig, parse_trainer_config


def test_seed_split_is_the_seeds_and_the_same_every_time():
    from sklearn.datasets import load_breast_cancer

    a, b = load_split(TrainerConfig()), load_split(TrainerConfig())
    data = load_breast_cancer()
    x_train, x_test, _, y_test = train_test_split(data.data, data.target, test_size=0.3, random_state=42)
    assert (len(a.x_train), len(a.x_test)) == (398, 171)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_allclose(a.x_test, x_test.astype(np.float32))
    np.testing.assert_array_equal(a.y_test, y_test)
    scaler = StandardScaler().fit(x_train)  # fitted on the training split only
    np.testing.assert_allclose(a.mean, scaler.mean_)
    np.testing.assert_allclose(a.variance, scaler.var_)


def test_synthetic_and_csv_data(tmp_path):
    cfg = parse_trainer_config('{"dataset": "synthetic", "syntheticSamples": 200, "syntheticFeatures": 6}')
    s = load_split(cfg)
    assert s.num_features == 6 and len(s.x_train) + len(s.x_test) == 200
    path = tmp_path / "d.csv"
    rows = ["a,b,label"] + [f"{i},{i % 7},{i % 2}" for i in range(100)]
    path.write_text("\n".join(rows))
    csv = load_split(parse_trainer_config(f'{{"dataset": "csv", "dataPath": "{path}"}}'))
    assert csv.feature_names == ("a", "b") and len(csv.x_train) == 70
    import pandas as pd

    pd.read_csv(path).rename(columns={"label": "y"}).to_parquet(tmp_path / "d.parquet")
    raw = f'{{"dataset": "parquet", "dataPath": "{tmp_path / "d.parquet"}", "labelColumn": "y"}}'
    parquet = load_split(parse_trainer_config(raw))
    np.testing.assert_array_equal(parquet.x_train, csv.x_train)


def test_a_spark_style_parquet_directory_and_a_glob_read_like_one_file(tmp_path):
    """Spark writes a directory of part files beside _SUCCESS and .crc markers; is_file refused it before."""
    import pandas as pd

    rows = range(100)
    frame = pd.DataFrame({"a": rows, "b": [i % 7 for i in rows], "label": [i % 2 for i in rows]})
    one = tmp_path / "one.parquet"
    frame.to_parquet(one)
    spark = tmp_path / "spark.parquet"
    spark.mkdir()
    for part, rows in enumerate((slice(0, 30), slice(30, 65), slice(65, 100))):
        frame[rows].to_parquet(spark / f"part-{part:05d}-0a1b.snappy.parquet")
        (spark / f".part-{part:05d}-0a1b.snappy.parquet.crc").write_bytes(b"crc")
    (spark / "_SUCCESS").write_text("")
    expected = load_split(parse_trainer_config(f'{{"dataset": "parquet", "dataPath": "{one}"}}'))
    for path in (spark, spark / "part-*.parquet"):
        got = load_split(parse_trainer_config(f'{{"dataset": "parquet", "dataPath": "{path}"}}'))
        np.testing.assert_array_equal(got.x_train, expected.x_train)
        np.testing.assert_array_equal(got.y_test, expected.y_test)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds no \\*.parquet files") as err:
        load_split(parse_trainer_config(f'{{"dataset": "parquet", "dataPath": "{empty}"}}'))
    assert err.value.setting == "MWMS_TRAINER_CONFIG.dataPath"


@pytest.mark.parametrize(
    ("content", "extra", "setting"),
    [
        (None, "", "MWMS_TRAINER_CONFIG.dataPath"),
        ("a,b\n1,2\n", "", "MWMS_TRAINER_CONFIG.labelColumn"),
        ("a,label\n1,3\n2,4\n", "", "MWMS_TRAINER_CONFIG.labelColumn"),
        ("a,label\nx,1\ny,0\n", "", "MWMS_TRAINER_CONFIG.dataPath"),
        ("a,label\n" + "1,0\n" * 20, ', "globalBatchSize": 64', "MWMS_TRAINER_CONFIG.globalBatchSize"),
    ],
)
def test_bad_data_names_the_setting(tmp_path, content, extra, setting):
    path = tmp_path / "d.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_split(parse_trainer_config(f'{{"dataset": "csv", "dataPath": "{path}"{extra}}}'))
    assert err.value.setting == setting


@given(
    rows=st.integers(min_value=1, max_value=500),
    batch=st.integers(min_value=1, max_value=64),
    epochs=st.integers(min_value=1, max_value=5),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_epoch_order_uses_only_full_batches_of_distinct_rows(rows, batch, epochs, seed):
    order = epoch_order(rows, batch, seed, range(epochs))
    steps = steps_per_epoch(rows, batch)
    assert order.shape == (epochs * steps, batch)
    for epoch in np.split(order, epochs) if steps else []:
        flat = epoch.reshape(-1)
        assert len(set(flat.tolist())) == len(flat) == steps * batch  # no row twice in an epoch
        assert flat.min() >= 0 and flat.max() < rows
    np.testing.assert_array_equal(order, epoch_order(rows, batch, seed, range(epochs)))  # every worker


def test_remainder_differs_between_epochs():
    order = epoch_order(398, 32, 42, range(10))  # 14 rows left over each epoch, not always the same 14
    used = [set(e.reshape(-1).tolist()) for e in np.split(order, 10)]
    assert len({frozenset(u) for u in used}) > 1
    assert set().union(*used) == set(range(398))


@given(workers=st.sampled_from([1, 2, 4, 8]), per_worker=st.integers(min_value=1, max_value=16))
def test_worker_slices_partition_the_global_batch_equally(workers, per_worker):
    batch = workers * per_worker
    slices = [worker_slice(batch, workers, r) for r in range(workers)]
    covered = [i for s in slices for i in range(batch)[s]]
    assert covered == list(range(batch))
    assert {s.stop - s.start for s in slices} == {per_worker}


@pytest.mark.parametrize(
    ("cells", "columns"),
    [
        (("", "1"), "'a'"),  # an empty csv cell is NaN
        (("inf", "-inf"), "'a', 'b'"),
        (("1e39", "1"), "'a'"),  # finite in float64, an infinity in the model's float32 input
    ],
)
def test_non_finite_inputs_exit_2_naming_columns_and_rows(tmp_path, cells, columns):
    path = tmp_path / "d.csv"
    rows = ["a,b,c,label"] + [f"{i},{i},{i},{i % 2}" for i in range(40)] + [f"{cells[0]},{cells[1]},1,0"] * 3
    path.write_text("\n".join(rows))
    with pytest.raises(ConfigError) as err:
        load_split(parse_trainer_config(f'{{"dataset": "csv", "dataPath": "{path}"}}'))
    assert err.value.setting == "MWMS_TRAINER_CONFIG.dataPath"
    assert "3 of 43 rows hold values that are not finite numbers" in str(err.value)
    assert f"in column(s) {columns};" in str(err.value)


def test_a_constant_column_is_scaled_by_1_like_standard_scaler(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("\n".join(["a,const,label"] + [f"{i},7,{i % 2}" for i in range(50)]))
    split = load_split(parse_trainer_config(f'{{"dataset": "csv", "dataPath": "{path}"}}'))
    scaler = StandardScaler().fit(split.x_train)
    np.testing.assert_allclose(np.sqrt(split.variance), scaler.scale_)
    assert split.variance[1] == 1.0  # (x - 7) / 1: a serving value of 8 becomes 1, not 1e7


def test_the_scalers_variance_is_standard_scalers_scale_squared_on_both_paths():
    """scaler_variance is the one zero-variance rule (both input paths call it): scikit-learn's."""
    rng = np.random.default_rng(0)
    noise = rng.normal(size=500)
    # spread; a constant; within rounding of a constant for its mean; tiny but real; zero
    x = np.column_stack([noise, np.full(500, 2024.3), 1e9 + 1e-7 * noise, 1e-3 * noise, np.zeros(500)])
    scaler = StandardScaler().fit(x)
    variance = scaler_variance(x.mean(axis=0), x.var(axis=0), len(x))
    np.testing.assert_allclose(variance, scaler.scale_**2, rtol=1e-9)
    assert list(variance[[1, 2, 4]]) == [1.0, 1.0, 1.0] and variance[3] < 1e-5


@given(first=st.integers(min_value=0, max_value=6), seed=st.integers(min_value=0, max_value=2**16))
def test_an_epochs_order_depends_only_on_seed_and_epoch(first, seed):
    """A fit resumed at epoch `first` reads exactly the batches the undisturbed fit read from there on."""
    steps = steps_per_epoch(100, 8)
    whole = epoch_order(100, 8, seed, range(8))
    np.testing.assert_array_equal(epoch_order(100, 8, seed, range(first, 8)), whole[first * steps :])
