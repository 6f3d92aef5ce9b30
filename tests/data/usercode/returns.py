"""A user's script (spec.code `returns.py BYTES`): the chief returns a list of about BYTES bytes as JSON."""

import sys

from mwms_trainer import MirroredStrategyRunner


def train(size):
    return ["x" * 98 for _ in range(size // 100)]


if __name__ == "__main__":
    MirroredStrategyRunner(num_slots=1, use_custom_strategy=True).run(train, size=int(sys.argv[1]))
