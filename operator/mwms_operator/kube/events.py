"""Which Event a new one is, after client-go's EventCorrelator: a repeat (the same reason and message on the
same object within a window) is counted on the Event posted first (client.py patches its count), and more
than SIMILAR_LIMIT different messages of one reason are combined into one, so a retried refusal never floods
the namespace. The EventBook that remembers them is shared by the API client's threads."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from mwms_contract import names

WINDOW_SECONDS = 600.0  # client-go's aggregation window: 10 minutes
SIMILAR_LIMIT = 10  # client-go's: the 10th different message of a kind starts combining
CACHE_SIZE = 4096  # client-go's LRU size: objects are forgotten, never the process's memory
COMBINED = "(combined from similar events): "

Key = tuple[str, str, str, str, str]  # namespace, object uid, type, reason, message (or COMBINED)


@dataclasses.dataclass(slots=True)  # one per event kept (up to CACHE_SIZE): no __dict__ each
class Posted:
    name: str  # the Event object's name
    count: int
    at: float  # when it was last posted or counted (monotonic seconds)


class EventBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # events are posted from the API client's threads
        self._posted: OrderedDict[Key, Posted] = OrderedDict()
        self._similar: OrderedDict[tuple[str, str, str, str], tuple[float, set[str]]] = OrderedDict()

    def correlate(
        self, namespace: str, uid: str, type_: str, reason: str, message: str, now: float
    ) -> tuple[Key, str, Posted | None]:
        """(the event's key, the message to post, the Event to count it on if it is a repeat)."""
        similar, message = (namespace, uid, type_, reason), sys.intern(message)  # many jobs say the same
        with self._lock:
            since, messages = self._similar.pop(similar, (now, set()))
            if now - since > WINDOW_SECONDS:
                since, messages = now, set()
            if len(messages) < SIMILAR_LIMIT:
                messages.add(message)
            _remember(self._similar, similar, (since, messages))
            if len(messages) >= SIMILAR_LIMIT and message not in messages:
                key, message = (*similar, COMBINED), COMBINED + message
            else:
                key = (*similar, message)
            seen = self._posted.get(key)
            if seen is not None and now - seen.at > WINDOW_SECONDS:
                seen = None
            return key, message, dataclasses.replace(seen) if seen is not None else None

    def posted(self, key: Key, name: str, count: int, now: float) -> None:
        with self._lock:
            self._posted.pop(key, None)
            _remember(self._posted, key, Posted(name, count, now))


def _remember(cache: OrderedDict, key: object, value: object) -> None:  # type: ignore[type-arg]
    cache[key] = value
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)


def new_event(
    meta: Mapping[str, Any], type_: str, reason: str, message: str, stamp: str, instance: str
) -> dict[str, Any]:
    """A core/v1 Event on the TrainJob of this metadata, counted once so far."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": names.MANAGED_BY},
        "reportingComponent": names.MANAGED_BY,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
