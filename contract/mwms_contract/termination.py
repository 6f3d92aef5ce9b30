"""The termination message: what a trainer worker leaves at its terminationMessagePath, which the kubelet puts
into the pod's status, where the operator (status.mlflow, the Failed condition) and the client (the job's
result) read it back. Writer and parser are both here, so the two sides cannot disagree; `write` is the one
place a worker writes the file.

- Success: one JSON object. The chief's holds its MLflow run (RUN_KEYS), its final METRICS and the job's
  result (RESULT, or RESULT_ARTIFACT and RESULT_BYTES when the value is too big for the message); the other
  workers write `{}`.
- Failure: one line, "<kind>: <what>", the kind saying how the worker exited (FAILURE_KINDS). The operator
  decides by the exit code, not by the text; the text is what a person reads in the Failed condition.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from mwms_contract import names

# The kubelet keeps the last 4096 bytes of the file; the writer cuts at 4000 from the front itself, so a long
# message keeps its kind and first words, and a summary that fits is never touched.
MAX_BYTES = 4000

RUN_ID = "runId"
EXPERIMENT_ID = "experimentId"
MODEL_URI = "modelUri"
RUN_KEYS = (RUN_ID, EXPERIMENT_ID, MODEL_URI)
METRICS = "metrics"
RESULT = "result"
RESULT_ARTIFACT = "resultArtifact"  # the result as an artifact of the chief's run (its URI)
RESULT_BYTES = "resultBytes"

INVALID_CONFIG = "invalid configuration"  # exit 2: a setting is wrong; the setting is named first
RETRYABLE = "retryable"  # exit 75 or a signal: the group restarts
FAILED = "failed"  # any other exit
FAILURE_KINDS = (INVALID_CONFIG, RETRYABLE, FAILED)
# What a worker stopped by SIGTERM with a checkpoint says (after RETRYABLE): the group saved at the next
# step, or that save did not end (not within the grace period, or the store failed); and where the next group
# resumes.
SAVED_ON_STOP = "stopped by SIGTERM: the group saved its checkpoint"
SAVE_UNFINISHED = "stopped by SIGTERM before the group's checkpoint was saved"


def failure_kind(exit_code: int) -> str:
    """The kind a failure line starts with for a worker that exits with exit_code."""
    if exit_code == names.EXIT_INVALID_CONFIG:
        return INVALID_CONFIG
    if exit_code == names.EXIT_RETRYABLE or exit_code >= 128:
        return RETRYABLE
    return FAILED


def failure(kind: str, what: str) -> str:
    """A failure line: "<kind>: <what>", whitespace (a traceback's newlines) folded into single spaces."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"a failure's kind is one of {FAILURE_KINDS}, not {kind!r}")
    return " ".join(f"{kind}: {what}".split())


def encode(message: str | Mapping[str, Any]) -> str:
    """What the worker writes: a failure line as it is, a summary as compact JSON; at most MAX_BYTES."""
    text = message if isinstance(message, str) else json.dumps(message, separators=(",", ":"))
    return text.encode()[:MAX_BYTES].decode(errors="ignore")  # a character cut in two is dropped


def write(path: str, message: str | Mapping[str, Any]) -> None:
    """Write `message` (encoded) to the worker's terminationMessagePath `path`. Never fatal: a worker that
    cannot write the file still ends with its exit code, which is what the operator decides by."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(encode(message))
    except OSError as e:
        logging.getLogger(__name__).debug("cannot write the termination message to %s: %s", path, e)


def summary(message: str) -> dict[str, Any] | None:
    """The summary of a worker that succeeded; None for a failure line, an empty or a cut message."""
    try:
        data = json.loads(message)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def run(message: str) -> dict[str, str] | None:
    """The chief's MLflow run (those of RUN_KEYS it names, as text); None when the message names no run."""
    data = summary(message)
    if data is None or not isinstance(data.get(RUN_ID), str):
        return None
    return {key: str(data[key]) for key in RUN_KEYS if data.get(key) is not None}


def parse_failure(message: str) -> tuple[str, str] | None:
    """(kind, what) of a failure line; None for anything else (a summary, or a message of no kind of ours)."""
    kind, sep, what = message.strip().partition(": ")
    return (kind, what) if sep and kind in FAILURE_KINDS else None
