"""The seed's train() after migration (docs/migration.md shows the diff); imported by the runner's workers."""

import tensorflow as tf  # the runner sets TF_USE_LEGACY_KERAS=1 first, so tf.keras is tf-keras
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from mwms_trainer import log_model, mlflow_callback


def train(epochs=60):
    tf.keras.utils.set_random_seed(42)  # changed: the same initial weights on every worker
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        data = load_breast_cancer()
        # changed: random_state, so every worker holds the same split
        X_train, X_test, y_train, y_test = train_test_split(
            data.data, data.target, test_size=0.3, random_state=42
        )
        N, D = X_train.shape  # number of observation and variables
        scaler = StandardScaler()
        X_train = scaler.fit_transform(X_train)
        X_test = scaler.transform(X_test)
        model = tf.keras.models.Sequential(
            [
                tf.keras.layers.Input(shape=(D,)),
                tf.keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])

    # changed: enough epochs, the global batch, per-epoch metrics in the chief's run
    r = model.fit(
        X_train,
        y_train,
        validation_data=(X_test, y_test),
        epochs=epochs,
        batch_size=32,
        callbacks=[mlflow_callback()],
    )
    log_model(model, "mymodel")  # changed: the chief logs a plain copy; other workers do nothing
    return {k: float(v[-1]) for k, v in r.history.items()}
