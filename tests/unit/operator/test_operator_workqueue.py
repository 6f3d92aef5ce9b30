"""The keyed work queue: changes to one key coalesce, one key is never handled twice at once, a key added
while it is handled runs again afterwards, and scheduled keys run when they fall due (the earliest wins)."""

from __future__ import annotations

import asyncio

from mwms_operator.workqueue import WorkQueue


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


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
        await asyncio.sleep(0.05)
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
        await asyncio.sleep(0.02)
        queue.add("a")  # during the first run: one more run after it, not a second one beside it
        queue.add("a")
        await asyncio.sleep(0.02)
        assert runs == 1
        release.set()
        await asyncio.sleep(0.05)
        await queue.stop()
        return most, runs

    assert run(main()) == (1, 2)


def test_a_scheduled_key_runs_when_due_and_the_earliest_schedule_wins():
    async def main():
        loop = asyncio.get_running_loop()
        times: dict[str, float] = {}
        start = loop.time()

        async def handle(key: str) -> None:
            times[key] = loop.time() - start

        queue = WorkQueue(handle, workers=1, name="t")
        queue.start()
        queue.add_after("late", 0.3)
        queue.add_after("soon", 0.5)
        queue.add_after("soon", 0.1)  # earlier: wins
        queue.add_after("late", 5)  # later: ignored
        assert queue.scheduled("soon")
        await asyncio.sleep(0.5)
        assert not queue.scheduled("soon")
        await queue.stop()
        return times

    times = run(main())
    assert 0.1 <= times["soon"] < 0.3 <= times["late"] < 0.5


def test_a_forgotten_schedule_does_not_run_and_a_failing_key_stops_nothing_and_is_retried():
    async def main():
        seen: list[str] = []

        async def handle(key: str) -> None:
            seen.append(key)
            if key == "boom" and seen.count("boom") == 1:
                raise OSError("connection reset")

        queue = WorkQueue(handle, workers=1, name="t", expected=(OSError,))
        queue.start()
        queue.add_after("gone", 0.05)
        queue.forget("gone")
        queue.add("boom")
        queue.add("next")
        await asyncio.sleep(0.15)
        assert seen == ["boom", "next"]
        await asyncio.sleep(0.6)  # the first retry comes after 0.5 s
        await queue.stop()
        return seen

    assert run(main()) == ["boom", "next", "boom"]
