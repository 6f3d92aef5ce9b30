"""The logged model takes what users hold: float64 or float32 rows, lists, and frames (by name for tables)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tf_support import group, trainjob_spec

pytestmark = pytest.mark.tf


def _train(name, trainer, server, tmp_path):
    g = group(trainjob_spec(name, 1, trainer), server.url, tmp_path / name).start()
    assert g.wait(timeout=300) == {0: 0}, g.log(0)[-3000:]
    import mlflow

    mlflow.set_tracking_uri(server.url)
    uri = g.summary()["modelUri"]
    served = mlflow.pyfunc.load_model(uri)
    return served, served.unwrap_python_model().keras_model


def _scores(prediction) -> np.ndarray:
    return np.asarray(prediction, dtype=np.float64).reshape(-1)


def test_seed_model_takes_raw_float64_rows_float32_rows_lists_and_frames(mlflow_server, tmp_path):
    from sklearn.datasets import load_breast_cancer

    served, keras_model = _train("serving-seed", {"epochs": 2}, mlflow_server, tmp_path)
    rows = load_breast_cancer().data[:20]  # float64, as scikit-learn's loaders return them
    assert rows.dtype == np.float64
    expected = keras_model.predict(rows.astype(np.float32), verbose=0).reshape(-1)
    for given in (rows, rows.astype(np.float32), rows.tolist(), load_breast_cancer(as_frame=True).data[:20]):
        np.testing.assert_allclose(_scores(served.predict(given)), expected, atol=1e-6)
    assert served.metadata.get_input_schema().input_names() == list(range(30))  # by position: no names


def test_table_model_takes_the_read_csv_frame_by_column_name(mlflow_server, tmp_path):
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame.rename(columns={"target": "label"})
    frame["visits"] = np.arange(len(frame)) % 5  # an integer column: int64 in read_csv's frame
    path = tmp_path / "cancer.csv"
    frame.to_csv(path, index=False)
    served, keras_model = _train(
        "serving-csv", {"dataset": "csv", "dataPath": str(path), "epochs": 2}, mlflow_server, tmp_path
    )
    features = [c for c in frame.columns if c != "label"]
    assert served.metadata.get_input_schema().input_names() == features

    user_frame = pd.read_csv(path)  # what a user holds: float64 and int64 columns, the label among them
    expected = keras_model.predict(user_frame[features].to_numpy(np.float32), verbose=0).reshape(-1)
    np.testing.assert_allclose(_scores(served.predict(user_frame)), expected, atol=1e-6)
    shuffled = user_frame[list(reversed(user_frame.columns))]  # by name, not by position
    np.testing.assert_allclose(_scores(served.predict(shuffled)), expected, atol=1e-6)
