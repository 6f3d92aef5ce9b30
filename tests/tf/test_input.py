"""The exact path's input pipeline: each epoch's order is built when fit reaches that epoch."""

from __future__ import annotations

import numpy as np

from mwms_trainer.input import exact
from mwms_trainer.trainer_config import TrainerConfig

ROWS, BATCH, EPOCHS, FIRST = 100, 8, 50, 3  # 12 global batches an epoch


def test_each_epochs_order_is_built_when_fit_reaches_it(monkeypatch):
    """Not every epoch's order before the first step (memory and startup time grow with epochs x rows)."""
    built: list[int] = []
    build = exact.epoch_batches

    def counted(rows: int, batch: int, seed: int, epoch: int) -> np.ndarray:
        built.append(epoch)
        return build(rows, batch, seed, epoch)

    monkeypatch.setattr(exact, "epoch_batches", counted)
    index = np.arange(ROWS, dtype=np.float32)
    # Each row's features are its own index, so a batch's first column is the batch's row indices.
    split = exact.Split(
        np.column_stack([index, index]), index % 2, index, index, ("a", "b"), np.zeros(2), np.ones(2)
    )
    cfg = TrainerConfig(epochs=EPOCHS, globalBatchSize=BATCH)
    batches = iter(exact.train_dataset(split, cfg, first_epoch=FIRST))
    first, _ = next(batches)
    assert built == [FIRST]
    steps = exact.steps_per_epoch(ROWS, BATCH)
    read = [first.numpy()[:, 0]] + [next(batches)[0].numpy()[:, 0] for _ in range(2 * steps - 1)]
    # The same batches as ever: those of epoch_order, which the N == 1 worker arithmetic is checked against.
    np.testing.assert_array_equal(
        np.array(read), exact.epoch_order(ROWS, BATCH, cfg.seed, range(FIRST, FIRST + 2))
    )
    assert built[:2] == [FIRST, FIRST + 1] and len(built) < EPOCHS - FIRST
