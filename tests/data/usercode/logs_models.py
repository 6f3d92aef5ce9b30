"""A user's module (spec.code `logs_models:train`): a model through the runner's log_model and one through
plain MLflow on the chief, as users write it."""

import mlflow
import tensorflow as tf

from mwms_trainer import is_chief, log_model


def _model():
    return tf.keras.Sequential([tf.keras.layers.Input(shape=(3,)), tf.keras.layers.Dense(1)])


def train():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = _model()
    log_model(model, "helper")
    if is_chief():
        mlflow.tensorflow.log_model(_model(), name="plain", pip_requirements=["tensorflow"])
    return {"done": True}
