"""The chief's return value as the job's result: JSON up to MAX_RESULT_BYTES, in the termination
message when small, else an artifact of the job's run; anything else fails the job rather than arrive cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mwms_contract import termination
from mwms_trainer.errors import ResultError

MAX_RESULT_BYTES = 1024 * 1024
INLINE_BYTES = 3000  # what is left of termination.MAX_BYTES after the run's fields
ARTIFACT = "mwms/result.json"
KEEP_IT_SMALL = "log bigger things to the run (mlflow.log_dict, mlflow.log_artifact) and return their names"


def encode(value: Any) -> str:
    """The value as JSON; ResultError when it is not JSON or above MAX_RESULT_BYTES."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        raise ResultError(
            f"the chief's return value is not JSON ({type(e).__name__}: {e}): return dicts, lists, strings "
            f"and numbers (an array's .tolist()); {KEEP_IT_SMALL}"
        ) from None
    size = len(text.encode())
    if size > MAX_RESULT_BYTES:
        raise ResultError(
            f"the chief's return value is {size} bytes as JSON, above the {MAX_RESULT_BYTES} bytes (1 MiB) "
            f"a job returns: {KEEP_IT_SMALL}"
        )
    return text


def summary_fields(value: Any, log_text: Callable[[str, str], str | None]) -> dict[str, Any]:
    """What the chief's termination message says of its value: the value itself, or where in MLflow it is.
    log_text(text, artifact_file) stores it in the job's run and returns its URI (None: no MLflow)."""
    text = encode(value)
    size = len(text.encode())
    if size <= INLINE_BYTES:
        return {termination.RESULT: value}
    uri = log_text(text, ARTIFACT)
    if uri is None:
        raise ResultError(
            f"the chief's return value is {size} bytes as JSON; without MLflow only {INLINE_BYTES} bytes fit "
            "in its termination message: give the job a tracking server (spec.mlflow.trackingUri, or the "
            f"operator's) to return up to 1 MiB, or {KEEP_IT_SMALL}"
        )
    return {termination.RESULT_ARTIFACT: uri, termination.RESULT_BYTES: size}
