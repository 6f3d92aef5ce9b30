"""The seed's train(), ported (docs/migration.md), as the script a user runs with `mwms submit`.

The last lines are the notebook's: in a worker pod MirroredStrategyRunner.run runs train() on this worker
inside the job's one MLflow run, and its value on the chief is the job's result.
"""

import argparse

import tensorflow as tf  # the trainer sets TF_USE_LEGACY_KERAS=1 first, so tf.keras is tf-keras
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from mwms_trainer import MirroredStrategyRunner, log_model, mlflow_callback


def train(epochs=60):
    tf.keras.utils.set_random_seed(42)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        data = load_breast_cancer()
        X_train, X_test, y_train, y_test = train_test_split(
            data.data, data.target, test_size=0.3, random_state=42
        )
        N, D = X_train.shape
        scaler = StandardScaler()
        X_train = scaler.fit_transform(X_train)
        X_test = scaler.transform(X_test)
        model = tf.keras.models.Sequential(
            [tf.keras.layers.Input(shape=(D,)), tf.keras.layers.Dense(1, activation="sigmoid")]
        )
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    r = model.fit(
        X_train,
        y_train,
        validation_data=(X_test, y_test),
        epochs=epochs,
        batch_size=32,
        callbacks=[mlflow_callback()],
    )
    log_model(model, "mymodel")
    return {k: float(v[-1]) for k, v in r.history.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=60)
    MirroredStrategyRunner(num_slots=4, use_custom_strategy=True).run(
        train, epochs=parser.parse_args().epochs
    )
