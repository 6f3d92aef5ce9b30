"""The one place TensorFlow and Keras are imported.

Keras 3 cannot run multi-worker MWMS fit (FACTS.md): TF_USE_LEGACY_KERAS=1 must be set before TensorFlow is
first imported, and the model code uses tf_keras.
"""

from __future__ import annotations

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
