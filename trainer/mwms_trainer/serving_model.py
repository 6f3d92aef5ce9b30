"""The logged model's code (MLflow "models from code"): saved with every model and run where it is
loaded, so it imports nothing of mwms_trainer. It checks its input itself against the training columns in its
model_config (docs/design/serving-model-signature.md).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import set_model
from mlflow.pyfunc import PythonModel


def _refused(message: str) -> MlflowException:
    """A 400 (not a 500) from MLflow's scoring server: the caller's input is wrong."""
    return MlflowException.invalid_parameter_value(message)


def feature_rows(model_input: Any, columns: list[str]) -> np.ndarray:
    """float32 rows of `columns` from what a caller holds, or an error naming what does not fit."""
    if isinstance(model_input, dict):
        model_input = pd.DataFrame(model_input)
    # A frame with named columns is read by name; pd.DataFrame(array) (columns 0..n-1) stays positional.
    if isinstance(model_input, pd.DataFrame) and not isinstance(model_input.columns, pd.RangeIndex):
        missing = [c for c in columns if c not in model_input.columns]
        if missing:
            known = set(columns)
            extra = [str(c) for c in model_input.columns if c not in known]
            raise _refused(
                f"the input lacks the model's column(s) {missing}"
                + (f" and has column(s) it does not know: {extra}" if extra else "")
                + f". The model takes its {len(columns)} training columns by name (any order, other columns "
                "ignored), or rows of that many values in the training order as an array or a list"
            )
        model_input = model_input[columns]
        text = [c for c in columns if not pd.api.types.is_numeric_dtype(model_input[c])]
        if text:
            raise _refused(f"column(s) {text} must hold numbers")
    try:
        rows = np.asarray(model_input, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise _refused(f"the input rows must hold numbers only: {e}") from None
    if rows.ndim != 2 or rows.shape[1] != len(columns):
        raise _refused(
            f"the model takes rows of {len(columns)} values (its training columns, in order); got input of "
            f"shape {rows.shape}"
        )
    return rows


class KerasRows(PythonModel):  # type: ignore[misc]
    keras_model: Any = None
    columns: list[str] = []

    def load_context(self, context: Any) -> None:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # the model is a tf-keras model
        import tf_keras

        self.keras_model = tf_keras.models.load_model(context.artifacts["keras_model"], compile=False)
        self.columns = [str(c) for c in context.model_config["columns"]]

    # No type hints here: MLflow would read them as an input schema and check the input against it.
    def predict(self, context, model_input, params=None):  # type: ignore[no-untyped-def]
        """One probability of the positive class per row."""
        rows = feature_rows(model_input, self.columns)
        return np.asarray(self.keras_model.predict(rows, verbose=0)).reshape(-1)


set_model(KerasRows())
