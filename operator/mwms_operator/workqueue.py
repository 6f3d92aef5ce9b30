"""A keyed work queue on asyncio, after client-go's: a key added many times is handled once, one key is never
handled by two workers at once, and a key added while it is being handled is handled again afterwards.
`add_after` schedules a key for a moment (a deadline), keeping the earliest moment asked for. A key whose
handling fails is retried after a backoff that doubles per failure (0.5 s up to a minute).

Nothing per key runs while it waits: a key costs a dict entry, not a task or a timer.

Measured as client-go's workqueue (metrics.py, label `name`): depth (keys waiting in the ready queue), adds
(keys that joined it), queue duration (from a key's add, or its due time, until a worker took it), work
duration (one handling) and retries (handlings that failed and were scheduled again).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from mwms_operator import logs, metrics

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)
FIRST_RETRY_SECONDS, LAST_RETRY_SECONDS = 0.5, 60.0


class WorkQueue(Generic[K]):
    def __init__(
        self,
        handle: Callable[[K], Awaitable[None]],
        *,
        workers: int,
        name: str,
        expected: tuple[type[BaseException], ...] = (),
    ) -> None:
        """`expected`: errors worth a retry but not a traceback (e.g. the API server's 500s, timeouts)."""
        self._handle, self._workers, self._name, self._expected = handle, workers, name, expected
        self._failures: dict[K, int] = {}
        self._ready: asyncio.Queue[K] = asyncio.Queue()
        self._dirty: set[K] = set()  # waiting in _ready, or to be handled again after the current run
        self._busy: set[K] = set()
        self._due: dict[K, float] = {}  # key -> loop time it is scheduled for
        self._heap: list[tuple[float, int, K]] = []
        self._order = 0
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._added: dict[K, float] = {}  # key -> when it joined the ready queue (monotonic)
        self._depth, self._adds = metrics.QUEUE_DEPTH.labels(name=name), metrics.QUEUE_ADDS.labels(name=name)
        self._latency = metrics.QUEUE_LATENCY.labels(name=name)
        self._duration = metrics.WORK_DURATION.labels(name=name)
        self._retries = metrics.QUEUE_RETRIES.labels(name=name)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work(), name=f"{self._name}-{i}") for i in range(self._workers)]
        self._tasks.append(loop.create_task(self._timer(), name=f"{self._name}-timer"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def add(self, key: K) -> None:
        if key in self._dirty:
            return  # already waiting: the changes coalesce into one run
        self._dirty.add(key)
        self._adds.inc()
        self._added[key] = time.monotonic()
        if key not in self._busy:
            self._put(key)

    def _put(self, key: K) -> None:
        self._ready.put_nowait(key)
        self._depth.set(self._ready.qsize())

    def add_after(self, key: K, delay: float) -> None:
        """Handle `key` in `delay` seconds, or earlier if it was already due earlier."""
        if delay <= 0:
            self.add(key)
            return
        when = asyncio.get_running_loop().time() + delay
        if self._due.get(key, float("inf")) <= when:
            return
        self._due[key] = when
        self._order += 1
        heapq.heappush(self._heap, (when, self._order, key))
        if self._heap[0][2] == key:
            self._wake.set()  # the timer sleeps until the earliest moment: it must look again

    def scheduled(self, key: K) -> bool:
        return key in self._due

    def forget(self, key: K) -> None:
        """Drop a pending schedule (the object is gone); a run already waiting still happens."""
        self._due.pop(key, None)
        self._failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._dirty) + len(self._busy)

    async def _work(self) -> None:
        while True:
            key = await self._ready.get()
            self._depth.set(self._ready.qsize())
            self._latency.observe(time.monotonic() - self._added.pop(key, time.monotonic()))
            self._dirty.discard(key)
            self._busy.add(key)
            with logs.about(key):  # its log lines name the job (logs.py), the retry's too
                started = time.monotonic()
                try:
                    await self._handle(key)
                    self._failures.pop(key, None)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # one job's trouble must not stop the others: log it, retry it
                    failures = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(FIRST_RETRY_SECONDS * 2 ** (failures - 1), LAST_RETRY_SECONDS)
                    if isinstance(error, self._expected):
                        log.warning("%s: %s failed (%s); again in %.1f s", self._name, key, error, delay)
                    else:
                        log.exception("%s: %s failed; again in %.1f s", self._name, key, delay)
                    self._retries.inc()
                    self.add_after(key, delay)
                finally:
                    self._duration.observe(time.monotonic() - started)
                    self._busy.discard(key)
                    if key in self._dirty:
                        self._put(key)

    async def _timer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            now = loop.time()
            while self._heap and self._heap[0][0] <= now:
                when, _, key = heapq.heappop(self._heap)
                if self._due.get(key) == when:  # else rescheduled earlier (already run) or forgotten
                    del self._due[key]
                    self.add(key)
            timeout = self._heap[0][0] - now if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
