"""The operator's log lines: text (the default) or one JSON object a line (MWMS_LOG_FORMAT=json or
`--log-format json`) for log pipelines, with `namespace` and `name` on every line about a TrainJob: the key
a work queue worker is handling (a context variable, so the API calls it makes in threads carry it too) or
the object of kopf's per-object loggers."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# (namespace, name) of the TrainJob the current task works on; None outside one.
JOB: ContextVar[tuple[str, str] | None] = ContextVar("mwms_job", default=None)


@contextlib.contextmanager
def about(key: Any) -> Iterator[None]:
    """Lines logged inside are about this job (a key with `namespace` and `name`; other keys: no change)."""
    namespace, name = getattr(key, "namespace", None), getattr(key, "name", None)
    token = JOB.set((str(namespace), str(name))) if namespace and name else None
    try:
        yield
    finally:
        if token is not None:
            JOB.reset(token)


def job_of(record: logging.LogRecord) -> tuple[str, str] | None:
    ref = getattr(record, "k8s_ref", None)  # kopf's per-object logger: the object its handler runs for
    if isinstance(ref, dict) and ref.get("name"):
        return str(ref.get("namespace") or ""), str(ref["name"])
    return JOB.get()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        job = job_of(record)
        if job is not None:
            entry["namespace"], entry["name"] = job
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str, log_format: str) -> None:
    """The root logger's one handler, on stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
