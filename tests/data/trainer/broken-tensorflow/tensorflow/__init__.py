# A TensorFlow that cannot be imported, put first on PYTHONPATH by tests/unit/trainer: the trainer imports it
# in a background thread, and its failure must end the worker as a failed import always did.
raise ImportError("libtensorflow_framework.so.2: cannot open shared object file (a test's broken TensorFlow)")
