"""The error every check of a TrainJob's spec raises, naming the field it found wrong."""

from __future__ import annotations


class SpecError(ValueError):
    """The TrainJob spec is invalid; `field` is the path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
