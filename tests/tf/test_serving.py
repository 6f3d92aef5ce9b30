"""The logged model takes what users hold, for every dataset kind: float64 or float32 rows and lists of rows
in the training column order, and DataFrames by column name in any order (other columns ignored); a frame
without a training column is refused naming it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tf_support import HANG_SECONDS, group, trainjob_spec


def _train(name, trainer, server, tmp_path):
    g = group(trainjob_spec(name, 1, trainer), server.url, tmp_path / name).start()
    assert g.wait(timeout=HANG_SECONDS) == {0: 0}, g.log(0)[-3000:]
    import mlflow

    mlflow.set_tracking_uri(server.url)
    uri = g.summary()["modelUri"]
    served = mlflow.pyfunc.load_model(uri)
    return served, served.unwrap_python_model().keras_model


def _scores(prediction) -> np.ndarray:
    return np.asarray(prediction, dtype=np.float64).reshape(-1)


def _takes_rows_lists_and_frames(served, keras_model, frame: pd.DataFrame) -> None:
    """`frame` holds the training columns (and maybe others): the model's column order comes from the model,
    never from the file's layout."""
    columns = served.unwrap_python_model().columns
    rows = frame[columns].to_numpy(np.float64)  # float64, as pandas and scikit-learn's loaders give them
    expected = keras_model.predict(rows.astype(np.float32), verbose=0).reshape(-1)
    shuffled = frame[list(reversed(frame.columns))]  # by name, not by position
    for given in (rows, rows.astype(np.float32), rows.tolist(), frame, shuffled, pd.DataFrame(rows)):
        np.testing.assert_allclose(_scores(served.predict(given)), expected, atol=1e-6)
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException, match=rf"lacks the model's column\(s\) \['{columns[1]}'\]"):
        served.predict(frame.drop(columns=[columns[1]]))
    with pytest.raises(MlflowException, match=rf"rows of {len(columns)} values"):
        served.predict(rows[:, 1:])


def test_seed_model_takes_raw_float64_rows_float32_rows_lists_and_frames(mlflow_server, tmp_path):
    from sklearn.datasets import load_breast_cancer

    served, keras_model = _train("serving-seed", {"epochs": 2}, mlflow_server, tmp_path)
    frame = load_breast_cancer(as_frame=True).data[:20]
    assert served.unwrap_python_model().columns == list(frame.columns)
    _takes_rows_lists_and_frames(served, keras_model, frame)


@pytest.mark.parametrize("dataset", ["csv", "parquet"])
def test_table_model_takes_rows_lists_and_the_users_frame_by_column_name(mlflow_server, tmp_path, dataset):
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame.rename(columns={"target": "label"})
    frame["visits"] = np.arange(len(frame)) % 5  # an integer column: int64 in the user's frame
    path = tmp_path / f"cancer.{dataset}"
    if dataset == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    trainer = {"dataset": dataset, "dataPath": str(path), "epochs": 2}
    served, keras_model = _train(f"serving-{dataset}", trainer, mlflow_server, tmp_path)
    assert sorted(served.unwrap_python_model().columns) == sorted(c for c in frame.columns if c != "label")
    user_frame = pd.read_csv(path) if dataset == "csv" else pd.read_parquet(path)  # the label among them
    _takes_rows_lists_and_frames(served, keras_model, user_frame)
