"""What converting another project's job gives: the TrainJob, what did not carry over and what carried over
in another form, each named by its field in the original; or a ConvertError naming the field that stopped it.
`mwms convert` prints them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ConvertError(ValueError):
    """The document cannot be converted; `field` is the path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Remark:
    path: str  # the field in the original
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Conversion:
    """The TrainJob, what did not carry over (`losses`) and what carried over in another form (`notes`)."""

    trainjob: dict[str, Any] = field(default_factory=dict)
    losses: list[Remark] = field(default_factory=list)
    notes: list[Remark] = field(default_factory=list)

    def lose(self, path: str, message: str) -> None:
        self.losses.append(Remark(path, message))

    def note(self, path: str, message: str) -> None:
        self.notes.append(Remark(path, message))


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    """An object of the original (None: empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConvertError(path, f"must be an object, got {type(value).__name__}")
    return value


def objects(value: Any, path: str) -> list[dict[str, Any]]:
    """A list of objects of the original (None: empty)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConvertError(path, "must be a list of objects")
    return value
