"""The one place TensorFlow and tf_keras are imported: with TF_USE_LEGACY_KERAS=1 set first
(docs/design/legacy-keras.md), and in a background thread from the trainer's start
(docs/design/tensorflow-background-import.md).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

_background: threading.Thread | None = None
_background_error: list[Exception] = []  # what the background import raised, re-raised by tensorflow()


def _import_tensorflow() -> Any:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep worker logs readable: no C++ info/warning spam
    import tensorflow as tf

    return tf


def import_in_background() -> None:
    """Start importing TensorFlow and tf_keras in a daemon thread (a failure is kept for tensorflow())."""
    global _background

    def target() -> None:
        try:
            _import_tensorflow()
            import tf_keras  # noqa: F401  (a second or more of its own, also off the main thread)
        except Exception as e:  # re-raised on the main thread by tensorflow(), where it is handled as ever
            _background_error.append(e)

    _background = threading.Thread(target=target, name="mwms-import-tensorflow", daemon=True)
    _background.start()


def tensorflow() -> Any:
    thread = _background
    if thread is not None and thread is not threading.current_thread():
        thread.join()
        if _background_error:
            raise _background_error[0]
    return _import_tensorflow()


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
