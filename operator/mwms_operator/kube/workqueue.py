"""A keyed work queue on asyncio, after client-go's: a key added many times is handled once, never by two
workers at once, and again if it was added while being handled. `add_after` schedules a key for a moment
(the earliest asked for wins); a key that falls due goes ahead of those merely added, as a deadline or a
retry is already late. A failed handling is retried after a doubling backoff; expected failures are logged
by a FailureLog, a few lines an outage. A waiting key costs a dict entry, not a task; the queue exports
client-go's workqueue metrics (telemetry/metrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from mwms_operator.telemetry import log_format, metrics

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)
FIRST_RETRY_SECONDS, LAST_RETRY_SECONDS = 0.5, 60.0
# While handlings keep failing, at most one summary line this often (seconds).
SUMMARY_SECONDS = 30.0
# At most this many kinds of error are each said at WARNING in one outage; further kinds are summed up.
MAX_KINDS = 20


class FailureLog(Generic[K]):
    """How a work queue tells failed handlings without a line per failure (an API server outage fails every
    key, again and again): the first failure of each kind of error at WARNING, the others at DEBUG; while
    failures go on, one summary at most every `every` seconds; and one line once no key is failing any more
    (if some failure was said at DEBUG only). A kind is the error's text without the key's own names."""

    def __init__(
        self, name: str, *, every: float = SUMMARY_SECONDS, clock: Callable[[], float] = time.monotonic
    ):
        self._name, self._every, self._clock = name, every, clock
        self._failing: set[K] = set()  # keys whose last handling failed
        self._start()

    def _start(self) -> None:
        """No outage: nothing counted, no kind said."""
        self._since: float | None = None  # when the first failure of this outage came
        self._said_at = 0.0
        self._kinds: set[str] = set()
        self._total, self._keys = 0, set[K]()  # of the whole outage
        self._recent, self._recent_keys = 0, set[K]()  # since the last summary
        self._latest = ""
        self._quiet = 0  # failures said at DEBUG only: the end is told only if some were

    def failed(self, key: K, error: str) -> int:
        """Count a failed handling; the level to log it at: WARNING if its kind is new in this outage."""
        now = self._clock()
        if self._since is None:
            self._since = self._said_at = now
        self._failing.add(key)
        self._total, self._recent, self._latest = self._total + 1, self._recent + 1, error
        self._keys.add(key)
        self._recent_keys.add(key)
        kind = _kind(key, error)
        if kind in self._kinds or len(self._kinds) >= MAX_KINDS:
            self._quiet += 1
            return logging.DEBUG
        self._kinds.add(kind)
        return logging.WARNING

    def done(self, key: K) -> None:
        """The key was handled (or forgotten): it is no longer failing."""
        self._failing.discard(key)

    def note(self) -> tuple[int, str] | None:
        """A line due now, if any: the outage's end, or a summary while it lasts."""
        if self._since is None:
            return None
        now = self._clock()
        if not self._failing:
            if not self._quiet:  # every failure was said on its own line
                self._start()
                return None
            line = (
                f"{self._name}: no key is failing any more: {self._total} failed handlings of "
                f"{len(self._keys)} keys in {now - self._since:.1f} s; latest error: {self._latest}"
            )
            self._start()
            return logging.INFO, line
        if now - self._said_at < self._every or not self._recent:
            return None
        line = (
            f"{self._name}: still failing: {self._recent} failed handlings of {len(self._recent_keys)} keys "
            f"in the last {now - self._said_at:.1f} s, {len(self._failing)} keys waiting for a retry; "
            f"latest error: {self._latest}"
        )
        self._said_at, self._recent, self._recent_keys = now, 0, set()
        return logging.WARNING, line


def _kind(key: Hashable, error: str) -> str:
    """The error's text without the key's own names (a job's name, its namespace, its uid), so that the
    same failure of two jobs is one kind."""
    for part in key if isinstance(key, tuple) else (key,):
        if isinstance(part, str) and len(part) > 2:
            error = error.replace(part, "…")
    return error


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
        # (0 for a key that fell due, else 1; order of joining; key). A due key already waiting joins again
        # ahead; the copy found later is skipped, as the key is no longer dirty.
        self._ready: asyncio.PriorityQueue[tuple[int, int, K]] = asyncio.PriorityQueue()
        self._urgent: set[K] = set()  # keys that fell due and wait to be handled
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
        self.failure_log: FailureLog[K] = FailureLog(name)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work(), name=f"{self._name}-{i}") for i in range(self._workers)]
        self._tasks.append(loop.create_task(self._timer(), name=f"{self._name}-timer"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def add(self, key: K, *, due: bool = False) -> None:
        if due:
            self._urgent.add(key)
        if key in self._dirty:
            if due and key not in self._busy:
                self._put(key)  # waiting behind others: again, ahead of them
            return  # already waiting: the changes coalesce into one run
        self._dirty.add(key)
        self._adds.inc()
        self._added[key] = time.monotonic()
        if key not in self._busy:
            self._put(key)

    def _put(self, key: K) -> None:
        self._order += 1
        self._ready.put_nowait((0 if key in self._urgent else 1, self._order, key))
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
        self.failure_log.done(key)

    def __len__(self) -> int:
        return len(self._dirty) + len(self._busy)

    async def _work(self) -> None:
        while True:
            _, _, key = await self._ready.get()
            self._depth.set(self._ready.qsize())
            if key not in self._dirty or key in self._busy:
                continue  # a copy of a key handled (or being handled) since: it is put again if added again
            self._urgent.discard(key)
            self._latency.observe(time.monotonic() - self._added.pop(key, time.monotonic()))
            self._dirty.discard(key)
            self._busy.add(key)
            with log_format.about(key):  # its log lines name the job (log_format.py), the retry's too
                started = time.monotonic()
                try:
                    await self._handle(key)
                    self._failures.pop(key, None)
                    self.failure_log.done(key)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # one job's trouble must not stop the others: log it, retry it
                    failures = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(FIRST_RETRY_SECONDS * 2 ** (failures - 1), LAST_RETRY_SECONDS)
                    if isinstance(error, self._expected):
                        level = self.failure_log.failed(key, str(error))
                        said = "%s: %s failed (%s); again in %.1f s"
                        if level == logging.WARNING:
                            said += (
                                f" (failures like it: DEBUG, a summary at most every {SUMMARY_SECONDS:.0f} s)"
                            )
                        log.log(level, said, self._name, key, error, delay)
                    else:
                        log.exception("%s: %s failed; again in %.1f s", self._name, key, delay)
                    self._retries.inc()
                    self.add_after(key, delay)
                finally:
                    self._duration.observe(time.monotonic() - started)
                    self._busy.discard(key)
                    if key in self._dirty:
                        self._put(key)
            note = self.failure_log.note()  # about the queue, not the job: outside log_format.about(key)
            if note is not None:
                log.log(*note)

    async def _timer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            now = loop.time()
            while self._heap and self._heap[0][0] <= now:
                when, _, key = heapq.heappop(self._heap)
                if self._due.get(key) == when:  # else rescheduled earlier (already run) or forgotten
                    del self._due[key]
                    self.add(key, due=True)
            timeout = self._heap[0][0] - now if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
