"""Prometheus' naming guide (prometheus.io/docs/practices/naming) as checks on what the operator exports, and
the metric names an expression (an alert, a dashboard panel) reads; used by the static tier (the registry)
and the integration tier (a live operator's /metrics)."""

from __future__ import annotations

import re
from collections.abc import Iterable

PREFIX = "mwms_"
# What prometheus_client exports by itself (the process and the Python runtime): standard names, no prefix.
LIBRARY_PREFIXES = ("process_", "python_")
# Units that are not the base unit (seconds, bytes, ...): the guide says to convert.
NOT_BASE_UNITS = ("milliseconds", "microseconds", "nanoseconds", "minutes", "hours", "days", "ms", "us",
                  "kilobytes", "megabytes", "gigabytes", "kb", "mb", "gb", "percent")  # fmt: skip
TIME_WORDS = ("duration", "latency", "time", "age", "seconds", "timestamp", "elapsed")
# A participle right before _seconds reads as the moment it happened (a timestamp), not how long it took.
MOMENT = re.compile(r"_(created|started|finished|completed|updated|scheduled|last)_seconds$")
# Series suffixes by family type: a counter's samples end _total, a histogram's _bucket, _sum and _count.
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def naming_problems(name: str, kind: str) -> list[str]:
    """What breaks the guide in one family `name` (without _total) of type `kind`."""
    problems = []
    if not name.startswith(PREFIX):
        problems.append(f"{name}: not under the one prefix {PREFIX!r}")
    if not re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", name):
        problems.append(f"{name}: not snake_case")
    words = name.split("_")
    if kind != "counter" and name.endswith("_total"):
        problems.append(f"{name}: _total on a {kind}")
    if kind == "counter" and name.endswith("_total"):
        problems.append(f"{name}: a counter's family name carries _total twice")
    for unit in NOT_BASE_UNITS:
        if unit in words:
            problems.append(f"{name}: {unit!r} is not a base unit (seconds, bytes)")
    timed = any(word in words for word in TIME_WORDS) and kind in ("gauge", "histogram", "summary")
    if timed and not name.endswith("_seconds"):
        problems.append(f"{name}: a time without the unit suffix _seconds")
    if MOMENT.search(name):
        problems.append(
            f"{name}: reads like a timestamp: _timestamp_seconds if it is one, else say what it measures"
        )
    if "timestamp" in words and not name.endswith("_timestamp_seconds"):
        problems.append(f"{name}: a timestamp is _timestamp_seconds")
    if name.endswith("_info") and kind != "gauge":
        problems.append(f"{name}: _info is a gauge of 1")
    return problems


def series_names(families: Iterable[tuple[str, str]]) -> set[str]:
    """Every series name that (family, type) pairs expose: what an expression may read."""
    return {name + suffix for name, kind in families for suffix in SUFFIXES.get(kind, ("",))}


def names_read(expr: str) -> set[str]:
    """The metric names an expression reads (strings, label matchers, ranges and grouping left out)."""
    bare = re.sub(r'"[^"]*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    words = set(re.findall(r"[A-Za-z_:][\w:]*", bare))
    return {w for w in words if w.startswith((PREFIX, *LIBRARY_PREFIXES)) or w == "up"}
