"""The seed's model with the scaler inside it, so the logged model takes raw feature rows."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mwms_trainer.tfenv import keras, tensorflow


@functools.cache
def one_reduce_sequential() -> Any:
    """tf_keras' Sequential with a training step that needs one cross-worker all-reduce: the gradients'.

    Keras' own step also reads every metric's state across workers and sums the returned logs, every step.
    Here a step only adds to each worker's own metric state, read once per call of the train function (one
    epoch: steps_per_execution is the epoch's steps); the numbers are the same, as the state is a sum.
    """
    k, tf = keras(), tensorflow()

    class OneReduceSequential(k.Sequential):  # type: ignore[name-defined, misc]
        stop_signal: Any = None  # group_checkpoint.StopSignal: SIGTERM rides on the gradients' all-reduce

        def train_step(self, data: Any) -> dict[str, Any]:
            x, y, sample_weight = k.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x, y, y_pred, sample_weight)  # also updates the loss metric
            # fit's step loop needs an output to carry: this worker's own loss, which the reduction method
            # "first" passes through without reading other workers.
            outputs = {"worker_batch_loss": loss}
            if self.stop_signal is None:
                self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
            else:
                # What minimize does, with every worker's stop flag summed in the same all-reduce.
                variables = self.trainable_variables
                gradients = tape.gradient(loss, variables)
                *summed, stop = tf.distribute.get_replica_context().all_reduce(
                    tf.distribute.ReduceOp.SUM, [*gradients, self.stop_signal.requested.read_value()]
                )
                self.optimizer.apply_gradients(
                    zip(summed, variables, strict=True), skip_gradients_aggregation=True
                )
                outputs["stop"] = stop
            self.compiled_metrics.update_state(y, y_pred, sample_weight)
            return outputs

        def make_train_function(self, force: bool = False) -> Any:
            built: Any = self.train_function  # type: ignore[has-type]
            if built is not None and not force:
                return built
            steps = (
                super().make_train_function(force) if self.stop_signal is None else self._stoppable_steps()
            )

            def train_function(iterator: Any) -> dict[str, Any]:
                steps(iterator)
                return self.get_metrics_result()  # outside the steps: read across workers once per call

            self.train_function = train_function
            return train_function

        def _stoppable_steps(self) -> Any:
            """Keras' multi-step train function, ending after the step whose summed stop flag is set (every
            worker sees the same sum, so all end at the same step); the flag is kept in stop_signal.agreed."""
            strategy, stop = self.distribute_strategy, self.stop_signal

            def run_step(data: Any) -> dict[str, Any]:
                outputs = self.train_step(data)
                with tf.control_dependencies([outputs["stop"]]):
                    self._train_counter.assign_add(1)
                return outputs

            def one_step(iterator: Any) -> dict[str, Any]:
                outputs = strategy.run(run_step, args=(next(iterator),))
                return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)

            @tf.function(reduce_retracing=True)
            def steps(iterator: Any) -> dict[str, Any]:
                outputs = one_step(iterator)
                for _ in tf.range(self._steps_per_execution - 1):
                    if outputs["stop"] > 0:
                        break
                    outputs = one_step(iterator)
                stop.agreed.assign(outputs["stop"])
                return outputs

            return steps

    return OneReduceSequential


def build_model(
    num_features: int,
    mean: np.ndarray,
    variance: np.ndarray,
    *,
    hidden_units: Sequence[int] = (),
    learning_rate: float = 0.001,
    steps_per_execution: int = 1,
    stop_signal: Any = None,
) -> Any:
    """Sequential([Input(D), Normalization(train mean/var), *Dense(relu), Dense(1, sigmoid)]), compiled;
    `stop_signal` (group_checkpoint.StopSignal): the steps carry a SIGTERM's stop across the group."""
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
    model = one_reduce_sequential()(layers)
    model.stop_signal = stop_signal
    model.distribute_reduction_method = "first"  # see OneReduceSequential.train_step
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


def held_out_metrics(model: Any, chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Accuracy and binary cross-entropy of a plain (non-distributed) model on the held-out rows, given as
    (x, y) chunks: all at once, or streamed from files (sharding: files)."""
    eps = 1e-7  # Keras' epsilon, so val_loss matches Keras' binary_crossentropy
    rows = correct = 0
    loss = 0.0
    for x, y in chunks:
        p = model.predict(x, batch_size=1024, verbose=0).reshape(-1).astype(np.float64)
        clipped = np.clip(p, eps, 1 - eps)
        loss -= float(np.sum(y * np.log(clipped) + (1 - y) * np.log(1 - clipped)))
        correct += int(np.sum((p > 0.5) == (y > 0.5)))
        rows += len(y)
    return {"val_accuracy": correct / rows, "val_loss": loss / rows}
