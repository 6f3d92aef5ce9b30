"""The training data behind one interface: `sharding: exact` (exact.py) or `sharding: files` (files.py).

train.py asks a TrainingInput for what it needs and never which kind it has.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from mwms_trainer.input import exact, files
from mwms_trainer.input.scaler import Agreed
from mwms_trainer.trainer_config import TrainerConfig

__all__ = ["Agreed", "TrainingInput", "prepare_input"]


class TrainingInput(Protocol):
    """One worker's training data, loaded and checked before any peer is waited for."""

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The model's input columns, in the order it takes them."""
        ...

    @property
    def num_features(self) -> int: ...

    def sizes(self) -> dict[str, Any]:
        """The run's params on the data's size known before the workers meet (row and file counts)."""
        ...

    def agree(self, strategy: Any) -> Agreed:
        """Once the group has met (may run a collective): the scaler and the steps per epoch, alike on every
        worker."""
        ...

    def dataset(self, strategy: Any, steps: int, first_epoch: int, first_step: int = 0) -> Any:
        """What fit reads, `steps` batches an epoch from step `first_step` of `first_epoch` on (where a
        resumed fit starts)."""
        ...

    def held_out(self) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """The held-out rows as (x, y) chunks, for the chief's metrics after the fit."""
        ...


def prepare_input(cfg: TrainerConfig, num_workers: int, rank: int) -> TrainingInput:
    """This worker's input for `cfg.sharding`; bad data exits 2 here, before MLflow or the peers."""
    if cfg.sharding == "files":
        return files.prepare(cfg, num_workers, rank)
    return exact.prepare(cfg, num_workers, rank)
