"""The one place TensorFlow and Keras are imported.

Keras 3 cannot run multi-worker MWMS fit (every worker fails before the first step with
`Attempt to convert a value (PerReplica:...)`, keras-team/keras#20585): TF_USE_LEGACY_KERAS=1 must be set
before TensorFlow is first imported, and the model code uses tf_keras.
"""

from __future__ import annotations

import logging
import os
from typing import Any


def tensorflow() -> Any:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep worker logs readable: no C++ info/warning spam
    import tensorflow as tf

    return tf


def keras() -> Any:
    tensorflow()
    import tf_keras

    return tf_keras


def size_thread_pools(threads: int | None) -> None:
    """Before TensorFlow's runtime starts (the strategy constructor starts it): pools of `threads` each."""
    if threads is None:
        return
    tf = tensorflow()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError as e:  # a user's script already started the runtime: its sizing stands
        logging.getLogger("mwms_trainer").warning("cannot size TensorFlow's thread pools: %s", e)
        return
    logging.getLogger("mwms_trainer").info("TensorFlow thread pools: %d threads each", threads)
