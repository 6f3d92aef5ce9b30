"""The logged model's code (MLflow "models from code"): MLflow saves this file with every model the trainer
logs and runs it where the model is loaded, so it imports nothing of mwms_trainer.

Rows arrive as MLflow's column-based signature has cast them (a DataFrame, columns in the training order):
the Keras model (scaler inside) takes them as float32. `unwrap_python_model().keras_model` is the Keras model.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
from mlflow.models import set_model
from mlflow.pyfunc import PythonModel


class KerasRows(PythonModel):  # type: ignore[misc]
    keras_model: Any = None

    def load_context(self, context: Any) -> None:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # the model is a tf-keras model
        import tf_keras

        self.keras_model = tf_keras.models.load_model(context.artifacts["keras_model"], compile=False)

    # No type hints here: MLflow would read them as a second input schema (the signature is the one).
    def predict(self, context, model_input, params=None):  # type: ignore[no-untyped-def]
        """One probability of the positive class per row."""
        if isinstance(model_input, pd.DataFrame):
            rows = model_input.to_numpy(dtype=np.float32)
        else:
            rows = np.asarray(model_input, dtype=np.float32)
        return np.asarray(self.keras_model.predict(rows, verbose=0)).reshape(-1)


set_model(KerasRows())
