"""The seed's model with the scaler inside it, so the logged model takes raw feature rows."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_trainer.tfenv import keras


def build_model(
    num_features: int,
    mean: np.ndarray,
    variance: np.ndarray,
    *,
    hidden_units: Sequence[int] = (),
    learning_rate: float = 0.001,
    steps_per_execution: int = 1,
) -> Any:
    """Sequential([Input(D), Normalization(train mean/var), *Dense(relu), Dense(1, sigmoid)]), compiled."""
    k = keras()
    layers = [
        k.layers.Input(shape=(num_features,), name="features"),
        # StandardScaler's statistics of the training split, as constants: (x - mean) / sqrt(var).
        k.layers.Normalization(
            mean=mean.astype(np.float32), variance=variance.astype(np.float32), name="scaler"
        ),
    ]
    layers += [k.layers.Dense(units, activation="relu") for units in hidden_units]
    layers.append(k.layers.Dense(1, activation="sigmoid"))
    model = k.Sequential(layers)
    model.compile(
        optimizer=k.optimizers.Adam(learning_rate=learning_rate),
        loss="binary_crossentropy",
        metrics=["accuracy"],
        # Several steps per tf.function call: the same math, less Python between collective steps.
        steps_per_execution=steps_per_execution,
    )
    return model


def plain_copy(model: Any) -> Any:
    """A copy of `model` outside any distribution strategy, safe to save or evaluate on the chief alone.

    Saving or evaluating the MWMS model runs collectives that block without the peers (SyncOnRead metric
    variables are all-reduced); reading its
    weights does not. The strategy scope is thread-local, so a fresh thread builds the copy outside it even
    when the caller is still inside `strategy.scope()`.
    """
    k = keras()
    result: dict[str, Any] = {}

    def build() -> None:
        try:
            copy = k.models.clone_model(model)
            copy.set_weights(model.get_weights())
            result["model"] = copy
        except BaseException as e:  # re-raised in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=build, name="mwms-plain-copy")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["model"]


def held_out_metrics(model: Any, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Accuracy and binary cross-entropy of a plain (non-distributed) model on the held-out rows."""
    p = model.predict(x, batch_size=1024, verbose=0).reshape(-1).astype(np.float64)
    eps = 1e-7  # Keras' epsilon, so val_loss matches Keras' binary_crossentropy
    clipped = np.clip(p, eps, 1 - eps)
    loss = -np.mean(y * np.log(clipped) + (1 - y) * np.log(1 - clipped))
    return {"val_accuracy": float(np.mean((p > 0.5) == (y > 0.5))), "val_loss": float(loss)}
