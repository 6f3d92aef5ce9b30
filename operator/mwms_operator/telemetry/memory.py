"""The operator's memory: watch events parsed without managedFields, which nothing reads
(docs/design/managed-fields.md), and the C allocator's free memory handed back to the system now and then
(docs/design/malloc-trim.md)."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from typing import Any


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # the process's C library, if glibc
    except (OSError, AttributeError):  # another C library (musl, macOS): nothing to call
        return None
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Hand the free pages of every heap back to the system (glibc's malloc_trim); False where the
    C library has no such call."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def without_managed_fields(event: Any) -> Any:
    """A watch event ({"type", "object"}) with its object's metadata.managedFields dropped, in place."""
    body = event.get("object") if isinstance(event, dict) else None
    meta = body.get("metadata") if isinstance(body, dict) else None
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return event


class _WatchJson:
    """The json module as kopf's watch stream sees it: every event parsed without managedFields."""

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)

    @staticmethod
    def loads(text: str | bytes, **kwargs: Any) -> Any:
        return without_managed_fields(json.loads(text, **kwargs))


def slim_watch_events() -> bool:
    """Make kopf parse its watch events without managedFields (its api.stream calls `json.loads` on each
    line); False, changing nothing, where kopf does not (another version; the unit tests check the pinned
    one)."""
    from kopf._cogs.clients import api

    if getattr(api, "json", None) is not json:
        return isinstance(getattr(api, "json", None), _WatchJson)
    api.json = _WatchJson()  # type: ignore[assignment]
    return True
