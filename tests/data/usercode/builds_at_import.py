"""A user's module (spec.code `builds_at_import:train`) written as a notebook cell: the strategy and the model
at the top level, so both are made while the entrypoint is imported. Worker 1 dies right after the strategy
is there, so the chief loses its peer while it broadcasts the model's initial weights."""

import json
import os
import signal

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    os.kill(os.getpid(), signal.SIGKILL)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(3,)), tf.keras.layers.Dense(1)])


def train():
    return model.count_params()
