"""Pure: the lines of a followed pod log: split from its chunks, and, read again after a break, only those
after the last one given (by the timestamp `timestamps=true` puts before each)."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Iterator

# The timestamp `timestamps=true` puts before each line of a log (RFC 3339, up to nanoseconds).
_STAMP = re.compile(r"(\S+?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ")
_EARLIEST = (datetime.datetime.min.replace(tzinfo=datetime.UTC), "")


def stamp(line: str) -> tuple[datetime.datetime, str]:
    """A timestamped log line's time, to compare (the earliest when it has none)."""
    found = _STAMP.match(line)
    if found is None:
        return _EARLIEST
    try:
        return datetime.datetime.fromisoformat(found[1] + found[3]), (found[2] or "").ljust(9, "0")
    except ValueError:
        return _EARLIEST


def unseen(lines: Iterable[str], last: str | None) -> Iterator[str]:
    """The timestamped lines of a log read again after a break, from the one after `last`, the last one
    given (None: all): up to it, or, should it be gone (the log rotated), up to the first later one."""
    for line in lines:
        if last is not None:
            if line == last:
                last = None
                continue
            if stamp(line) <= stamp(last):
                continue
            last = None
        yield line


def lines_of(chunks: Iterator[bytes]) -> Iterator[str]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.decode(errors="replace")
    if buffer:
        yield buffer.decode(errors="replace")
