"""A function a notebook hands to `MirroredStrategyRunner(cluster=...).run(train, size=N)`: the chief returns
a list of about N bytes as JSON (no TensorFlow needed for that)."""


def train(size):
    return ["x" * 98 for _ in range(size // 100)]
