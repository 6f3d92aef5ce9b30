"""The leader's renew loop (leader.py, __main__.renew_in_background) against a fake API: whatever the API
server answers, or does not, the leader stops reconciling before a standby may take over."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import kopf
import pytest

from mwms_kit.fake_kube import FakeKube
from mwms_operator import __main__ as entry
from mwms_operator.kube.leader import Elector, LeaseLost, Timing

ME = "operator-0_1"
BOUND = 30  # seconds a test waits for what must happen long before (a hang fails, not blocks, the run)


def lease(holder: str | None = ME, renewed: str = "2026-12-05T08:00:00.000000Z") -> dict[str, Any]:
    return {
        "metadata": {"name": "mwms-operator-leader", "namespace": "mwms-system", "resourceVersion": "7"},
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 1},
    }


def leasing(read: Callable[[], Any], write: Callable[[], bool] = lambda: True) -> FakeKube:
    """A fake API whose get_lease answers `read()` and whose lease writes answer `write()`."""
    kube = FakeKube()
    kube.lease_read, kube.lease_write = read, write
    return kube


def writes(kube: FakeKube) -> int:
    return len(kube.named("update_lease"))


def elector(kube: FakeKube, timing: Timing) -> Elector:
    made = Elector(kube, "mwms-system", ME, timing, "mwms-operator-leader")  # type: ignore[arg-type]
    made.renewed_at = made._clock()  # as acquire leaves it: it has just written the Lease
    return made


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run `work`; its result, or the exception it raised, lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of a test, so a fake call that hangs returns (its worker thread ends)."""
    event = threading.Event()
    yield event
    event.set()


def not_json() -> Any:
    raise json.JSONDecodeError("Expecting value", "<html>", 0)  # a 2xx whose body is not JSON (a proxy)


def login_fails() -> Any:
    raise kopf.LoginError("the token on disk was not accepted")  # the re-login after a 401


@pytest.mark.parametrize(
    "read",
    [login_fails, not_json, lambda: {"spec": {"holderIdentity": ME}}],  # the last: a Lease without metadata
    ids=["login-error", "not-json", "no-metadata"],
)
def test_any_error_while_renewing_exits_the_process_at_once(monkeypatch, read):
    exited: list[int] = []
    done = threading.Event()

    def exit_(code: int) -> None:
        exited.append(code)
        done.set()

    monkeypatch.setattr(entry.os, "_exit", exit_)
    monkeypatch.setattr(entry.logging, "shutdown", lambda: None)  # pytest's own handlers stay open
    # A renew deadline far away: what ends the leadership is the error, not the deadline.
    leader = elector(leasing(read), Timing(lease_duration=7200, renew_deadline=3600, retry_period=0.01))
    stop = threading.Event()
    thread = entry.renew_in_background(leader, stop)
    try:
        assert done.wait(BOUND), "the renew thread ended (or goes on) without ending the process"
    finally:
        stop.set()
        thread.join(BOUND)
    assert exited == [entry.EXIT_LOST_LEADERSHIP]


def test_a_round_that_hangs_ends_the_leadership_by_the_renew_deadline(release):
    """A PUT that never answers (and ignores its timeout, as a slow re-login or a trickling answer can)."""
    kube = leasing(lambda: lease(), write=lambda: release.wait() and False)
    leader = elector(kube, Timing(lease_duration=60, renew_deadline=0.5, retry_period=0.05))
    renewed = leader.renewed_at
    thread, outcome = in_thread(lambda: leader.keep_renewing(threading.Event()))
    thread.join(BOUND)
    assert not thread.is_alive(), "the leader still leads while its renewal hangs"
    (error,) = outcome
    assert isinstance(error, LeaseLost) and "not renewed within 0.5 s" in str(error)
    assert leader.renewed_at == renewed  # it never counted the hung round as a renewal


def test_each_call_of_a_round_waits_only_for_what_is_left_of_the_deadline():
    now = [100.0]
    timing = Timing(lease_duration=15, renew_deadline=10, retry_period=2)

    def slow_read() -> dict[str, Any]:
        now[0] += 0.5  # the GET took half a second
        return lease()

    kube = leasing(slow_read)
    leader = elector(kube, timing)
    leader._clock = lambda: now[0]
    assert leader.renew(deadline=100.7)
    assert kube.calls == [("get_lease", pytest.approx(0.7)), ("update_lease", pytest.approx(0.2))]
    assert leader.renewed_at == 100.0  # the round's start: the Lease was written no earlier

    # The deadline passes during the GET: no PUT is sent, the leadership is over.
    kube.calls.clear()
    with pytest.raises(LeaseLost, match="not renewed within 10 s"):
        leader.renew(deadline=now[0] + 0.3)
    assert kube.calls == [("get_lease", pytest.approx(0.3))]


@pytest.mark.parametrize(
    ("found", "why"),
    [(lease("operator-1_9"), "held by operator-1_9"), (lease(None), "held by nobody"), (None, "deleted")],
    ids=["another-holder", "released", "deleted"],
)
def test_a_lease_that_is_no_longer_ours_ends_the_leadership_at_the_first_round(found, why):
    kube = leasing(lambda: found)
    leader = elector(kube, Timing(lease_duration=7200, renew_deadline=3600, retry_period=0.01))
    thread, outcome = in_thread(lambda: leader.keep_renewing(threading.Event()))
    thread.join(BOUND)
    assert not thread.is_alive(), "the leader goes on reconciling beside another holder"
    (error,) = outcome
    assert isinstance(error, LeaseLost) and why in str(error)
    assert writes(kube) == 0  # it never wrote over the other holder


def test_failed_rounds_within_the_deadline_do_not_end_the_leadership():
    answers = iter([OSError("connection reset"), lease(), lease(), lease()])

    def read() -> Any:
        answer = next(answers, None)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    stop = threading.Event()
    kube = leasing(read, write=lambda: writes(kube) < 3 or stop.set() or True)
    leader = elector(kube, Timing(lease_duration=7200, renew_deadline=3600, retry_period=0.01))
    thread, outcome = in_thread(lambda: leader.keep_renewing(stop))
    thread.join(BOUND)
    assert outcome == [None] and writes(kube) == 3  # stopped by `stop`, after three renewals


def test_a_standby_wakes_when_the_lease_it_watches_expires_not_a_retry_period_later():
    """The takeover bound (lease duration + one retry period) must not depend on how the retry period falls
    on the holder's last renewal."""
    kube = leasing(lambda: lease("operator-1_9"))
    standby = Elector(
        kube,  # type: ignore[arg-type]
        "mwms-system",
        ME,
        Timing(lease_duration=15, renew_deadline=10, retry_period=3600),
        "mwms-operator-leader",
    )
    thread, outcome = in_thread(lambda: standby.acquire(threading.Event()))
    thread.join(BOUND)
    assert not thread.is_alive(), "the standby waits a whole retry period past the Lease's expiry"
    assert outcome == [True] and writes(kube) == 1


BLOCKED_STDERR_LEADER = """
import fcntl, logging, os, sys, threading
from mwms_kit.fake_kube import FakeKube
from mwms_operator import __main__ as entry
from mwms_operator.kube.leader import Elector, Timing

logging.basicConfig(stream=sys.stderr, level=logging.INFO)
# Fill the stderr pipe (nobody reads it) without blocking here, then make it blocking again: the leader's
# next log write blocks, as one does when a log collector stops reading.
flags = fcntl.fcntl(2, fcntl.F_GETFL)
fcntl.fcntl(2, fcntl.F_SETFL, flags | os.O_NONBLOCK)
try:
    while True:
        os.write(2, b"x" * 4096)
except BlockingIOError:
    pass
fcntl.fcntl(2, fcntl.F_SETFL, flags)

def refused():
    raise RuntimeError("the API server refused the Lease")

kube = FakeKube()
kube.lease_read = refused
timing = Timing(lease_duration=7200, renew_deadline=3600, retry_period=0.01)
leader = Elector(kube, "mwms-system", "me", timing, "mwms-operator-leader")
leader.renewed_at = leader._clock()
entry.renew_in_background(leader, threading.Event())
threading.Event().wait()  # the handlers' loop, which only the renew thread's exit ends
"""


def test_a_leader_whose_stderr_blocks_still_exits_when_it_loses_the_lease():
    """The exit does not wait on the log line: a full stderr pipe must not keep a lost leader reconciling."""
    child = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_STDERR_LEADER], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert child.wait(BOUND) == entry.EXIT_LOST_LEADERSHIP
    except subprocess.TimeoutExpired:
        pytest.fail("the leader lost its Lease but went on running while its stderr was blocked")
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
