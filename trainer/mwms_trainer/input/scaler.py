"""The model's scaler and steps per epoch, as both input paths settle them before the first step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Agreed:
    """What every worker holds alike once the group has met: the scaler's statistics of all training rows,
    the steps per epoch, and the run's params that only the meeting told (none for `sharding: exact`)."""

    mean: np.ndarray
    variance: np.ndarray  # scaler_variance's
    steps_per_epoch: int
    params: dict[str, Any]


def scaler_variance(mean: np.ndarray, variance: np.ndarray, rows: int) -> np.ndarray:
    """The variance the model's scaler divides by: StandardScaler's scale_**2, so a constant column's is 1.

    Constant by scikit-learn's own rule (StandardScaler's _is_constant_feature and _handle_zeros_in_scale): a
    variance within float64 rounding of 0 for this mean and row count (docs/design/constant-columns.md).
    """
    eps = np.finfo(np.float64).eps
    bound = rows * eps * variance + (rows * mean * eps) ** 2
    constant = (variance <= bound) | (np.sqrt(variance) < 10 * eps)
    return np.where(constant, 1.0, variance)
