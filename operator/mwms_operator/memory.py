"""Give the C allocator's free memory back to the system now and then. glibc returns by itself only the free
memory at the top of a heap; what the operator freed below it (a burst's JSON, its API threads' buffers, the
list of every object at a start) stays in the process's RSS for good. With 1,000 suspended TrainJobs, about
5 MiB of the operator's ~65 MiB were such free memory."""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # the process's C library, if glibc
    except (OSError, AttributeError):  # another C library (musl, macOS): nothing to call
        return None
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Hand the free pages of every heap back to the system (glibc's malloc_trim: a few ms); False where the
    C library has no such call."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
