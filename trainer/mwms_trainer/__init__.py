"""The MWMS trainer: `python -m mwms_trainer` in worker pods, and MirroredStrategyRunner for
spark-tensorflow-distributor users.

Importing the package imports none of its modules (`python -m mwms_trainer` forks as PID 1 before any heavy
import): the names below load their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["MirroredStrategyRunner", "is_chief", "log_model", "mlflow_callback"]
_EXPORTS = {name: "mwms_trainer.strategy_runner" for name in __all__}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'mwms_trainer' has no attribute {name!r}")
