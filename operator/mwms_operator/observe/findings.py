"""Pure: what a look beyond the watched objects found, as the next decision reads it: the API server refused
to create a job's workers for now, or a look at the job's tracking server decided a condition."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mwms_contract.conditions import CREATE_PODS_REFUSED


@dataclass(frozen=True)
class CreationRefused:
    """The API server refused to create this job's workers for now (a reason of REFUSALS, decide/policy.py):
    its message, how many tries were refused, when the next one is, and how long until then."""

    message: str
    tries: int
    next_try: datetime
    wait_seconds: float = 0.0
    reason: str = CREATE_PODS_REFUSED


@dataclass(frozen=True)
class Said:
    """A condition that a look outside the pods decided (the job's tracking server: mlflow/runwatch.py). The
    decision writes it, and posts one event each time its status or reason changes (not on every poll)."""

    type: str
    status: bool
    reason: str
    message: str
    warning: bool = False  # the event's type: Warning, else Normal
