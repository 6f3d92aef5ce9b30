"""The scenarios: each one a `Scenario` whose `run(args, figures)` fills `figures` as it measures, so a run
cut short still leaves what it measured in its record."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Figures = dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    name: str
    help: str
    run: Callable[[argparse.Namespace, Figures], None]
    # option -> its default (a bool: a flag; a list: one or more values; Path: a path, none by default), or
    # (that, its help); "command" takes the rest of the command line
    options: dict[str, Any] = field(default_factory=dict)
