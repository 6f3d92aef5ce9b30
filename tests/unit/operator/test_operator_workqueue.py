"""The keyed work queue: changes to one key coalesce, one key is never handled twice at once, a key added
while it is handled runs again afterwards, and scheduled keys run when they fall due (the earliest wins)."""

from __future__ import annotations

import asyncio
import logging

from mwms_operator.kube.workqueue import FailureLog, WorkQueue
from mwms_operator.observe.state import JobKey


class SteppedLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test moves it, so a schedule is checked by its logic,
    never by how fast a loaded machine runs."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


def run(coro):
    with asyncio.Runner(loop_factory=SteppedLoop) as runner:
        return runner.run(coro)


async def settle() -> None:
    """Let every task run until it waits again (on the clock or a queue): the loop's clock stays put."""
    for _ in range(50):
        await asyncio.sleep(0)


async def tick_to(seconds: float) -> None:
    """Move the clock to `seconds` in steps of 0.1 s, letting every task run after each step."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SteppedLoop)
    await settle()
    for step in range(round(loop.now * 10) + 1, round(seconds * 10) + 1):
        loop.now = step / 10
        await settle()


def test_adds_before_a_run_coalesce_into_one():
    async def main():
        seen: list[str] = []

        async def handle(key: str) -> None:
            seen.append(key)

        queue = WorkQueue(handle, workers=4, name="t")
        for _ in range(5):
            queue.add("a")
        queue.add("b")
        queue.start()
        await settle()
        await queue.stop()
        return seen

    assert sorted(run(main())) == ["a", "b"]


def test_one_key_is_never_handled_twice_at_once_and_an_add_during_a_run_runs_again():
    async def main():
        active, most, runs = 0, 0, 0
        release = asyncio.Event()

        async def handle(key: str) -> None:
            nonlocal active, most, runs
            active += 1
            most = max(most, active)
            runs += 1
            if runs == 1:
                await release.wait()
            active -= 1

        queue = WorkQueue(handle, workers=4, name="t")
        queue.start()
        queue.add("a")
        await settle()
        queue.add("a")  # during the first run: one more run after it, not a second one beside it
        queue.add("a")
        await settle()
        assert runs == 1
        release.set()
        await settle()
        await queue.stop()
        return most, runs

    assert run(main()) == (1, 2)


def test_a_scheduled_key_runs_when_due_and_the_earliest_schedule_wins():
    async def main():
        loop = asyncio.get_running_loop()
        handled_at: dict[str, float] = {}

        async def handle(key: str) -> None:
            handled_at[key] = loop.time()

        queue = WorkQueue(handle, workers=1, name="t")
        queue.start()
        queue.add_after("late", 0.3)
        queue.add_after("soon", 0.5)
        queue.add_after("soon", 0.1)  # earlier: wins
        queue.add_after("late", 5)  # later: ignored
        assert queue.scheduled("soon")
        await tick_to(0.2)
        assert handled_at == {"soon": 0.1} and not queue.scheduled("soon") and queue.scheduled("late")
        await tick_to(1.0)
        await queue.stop()
        return handled_at

    assert run(main()) == {"soon": 0.1, "late": 0.3}


def test_a_forgotten_schedule_does_not_run_and_a_failing_key_stops_nothing_and_is_retried():
    async def main():
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []

        async def handle(key: str) -> None:
            seen.append((key, loop.time()))
            if key == "boom" and len(seen) == 1:
                raise OSError("connection reset")

        queue = WorkQueue(handle, workers=1, name="t", expected=(OSError,))
        queue.start()
        queue.add_after("gone", 0.1)
        queue.forget("gone")
        queue.add("boom")
        queue.add("next")
        await tick_to(1.0)  # the first retry comes 0.5 s after the failure
        await queue.stop()
        return seen

    assert run(main()) == [("boom", 0.0), ("next", 0.0), ("boom", 0.5)]


def test_an_outage_is_told_in_a_few_lines_not_one_per_failed_handling():
    """1,000 keys failing with the same error for 12 s (an API server outage): the first failure at WARNING,
    the others at DEBUG, one summary per 30 s while it lasts, one line once every key is handled again."""
    clock = [0.0]
    failures: FailureLog[JobKey] = FailureLog("reconcile", clock=lambda: clock[0])
    keys = [JobKey("team-a", f"job-{i}", f"uid-{i}") for i in range(1000)]
    levels, notes = [], []
    for tick in range(120):  # every key fails about once a second
        clock[0] = tick / 10
        for key in keys[tick % 10 :: 10]:
            levels.append(failures.failed(key, "[Errno 111] Connection refused"))
            notes.append(failures.note())
    assert levels.count(logging.WARNING) == 1 and len(levels) == 12_000
    assert [n for n in notes if n] == [], "no summary before 30 s"
    clock[0] = 31.0
    failures.failed(keys[0], "[Errno 111] Connection refused")
    level, summary = failures.note()
    assert level == logging.WARNING and "12001 failed handlings of 1000 keys" in summary
    assert failures.note() is None, "one summary at most every 30 s"
    for key in keys[:-1]:
        failures.done(key)
        assert failures.note() is None, "a key still fails"
    failures.done(keys[-1])
    level, end = failures.note()
    assert level == logging.INFO and "no key is failing any more: 12001 failed handlings of 1000 keys" in end
    assert failures.note() is None
    # The next outage is told again.
    assert failures.failed(keys[0], "[Errno 111] Connection refused") == logging.WARNING


def test_a_failure_of_another_kind_is_still_said_and_one_named_after_its_job_is_not_another_kind():
    failures: FailureLog[JobKey] = FailureLog("reconcile", clock=lambda: 0.0)
    a, b = JobKey("team-a", "mnist", "uid-1"), JobKey("team-a", "cifar", "uid-2")
    assert failures.failed(a, "(500) etcdserver: request timed out") == logging.WARNING
    assert failures.failed(b, "(500) etcdserver: request timed out") == logging.DEBUG
    assert failures.failed(a, 'trainjobs "mnist" in team-a: (503) unavailable') == logging.WARNING
    assert failures.failed(b, 'trainjobs "cifar" in team-a: (503) unavailable') == logging.DEBUG


def test_a_lone_failure_is_one_line_as_before():
    failures: FailureLog[str] = FailureLog("reconcile", clock=lambda: 0.0)
    assert failures.failed("a", "connection reset") == logging.WARNING
    failures.done("a")
    assert failures.note() is None, "nothing was left unsaid"


def test_the_queue_logs_a_failing_outage_once_and_its_end(caplog):
    async def main():
        tried: set[str] = set()
        handled: list[str] = []
        all_handled = asyncio.Event()

        async def handle(key: str) -> None:
            if key not in tried:
                tried.add(key)
                raise OSError("connection refused")
            handled.append(key)
            if len(handled) == 50:
                all_handled.set()

        queue = WorkQueue(handle, workers=4, name="t", expected=(OSError,))
        queue.start()
        for i in range(50):
            queue.add(f"k{i}")
        await tick_to(1.0)  # each retried after 0.5 s, and handled
        assert all_handled.is_set()
        await queue.stop()

    with caplog.at_level(logging.INFO, logger="mwms_operator.kube.workqueue"):
        run(main())
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO], said
    assert "t: k0 failed (connection refused)" in said[0][1]
    assert "no key is failing any more: 50 failed handlings of 50 keys" in said[1][1]


def test_a_key_that_falls_due_goes_ahead_of_a_backlog_and_is_handled_once():
    """A deadline or a coalesced status write that falls due must not wait behind thousands of added keys;
    a due key already waiting is moved ahead, not handled twice."""

    async def main():
        seen: list[str] = []
        release = asyncio.Event()

        async def handle(key: str) -> None:
            seen.append(key)
            if key == "x":
                await release.wait()

        queue = WorkQueue(handle, workers=1, name="t")
        queue.start()
        queue.add("x")
        await settle()  # the one worker is busy with x
        for key in "abc":
            queue.add(key)
        queue.add_after("d", 0.1)
        queue.add_after("c", 0.1)
        await tick_to(0.1)
        assert not queue._heap, "the timer has moved both due keys to the ready queue"
        release.set()
        await settle()
        assert not len(queue)
        await queue.stop()
        return seen

    assert run(main()) == ["x", "d", "c", "a", "b"]
