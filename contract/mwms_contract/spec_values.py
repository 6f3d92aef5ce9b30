"""Reading a TrainJob's values: SpecError names the offending field; the checks of types, ranges and volume
sources that trainjob.py and checkpoint_spec.py share."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# Durations beyond ten years are surely mistakes (and would overflow date arithmetic); the CRD says the same.
MAX_SECONDS = 10 * 365 * 24 * 3600
VOLUME_SOURCES = ("persistentVolumeClaim", "hostPath", "nfs")  # spec.checkpoint, spec.code.volume


class SpecError(ValueError):
    """The TrainJob spec is invalid; `field` is the path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be an object, got {type(value).__name__}")
    return value


def integer(value: Any, path: str, *, minimum: int, maximum: int | None = None) -> int:
    # bool is an int in Python; a YAML `true` is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise SpecError(path, f"must be {bound}, got {value}")
    return value


def optional_integer(value: Any, path: str, *, minimum: int, maximum: int | None = None) -> int | None:
    return None if value is None else integer(value, path, minimum=minimum, maximum=maximum)


def string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(path, f"must be a non-empty string, got {value!r}")
    return value


def list_of_objects(value: Any, path: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(path, f"must be a list, got {type(value).__name__}")
    for k, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise SpecError(f"{path}[{k}]", f"must be an object, got {type(item).__name__}")
    return value


def volume_source(value: Any, path: str) -> Mapping[str, Any] | None:
    """spec.checkpoint or spec.code.volume: exactly one of the VOLUME_SOURCES."""
    if value is None:
        return None
    source = mapping(value, path)
    present = [key for key in VOLUME_SOURCES if key in source]
    unknown = sorted(set(source) - set(VOLUME_SOURCES))
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", f"unsupported volume source; use one of {VOLUME_SOURCES}")
    if len(present) != 1:
        raise SpecError(path, f"must set exactly one of {', '.join(VOLUME_SOURCES)}")
    return copy.deepcopy(dict(source))
