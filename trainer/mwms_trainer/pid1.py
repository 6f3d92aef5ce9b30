"""Stopping promptly as a container's PID 1: fork; the child trains, the parent forwards signals, reaps
and exits with the child's code (docs/design/trainer-as-pid1.md). `python -m mwms_trainer.pid1 CMD` does the
same for any command. A child that saves its checkpoint on SIGTERM asks for the time (ask_for_grace): it is
then not killed, and the pod's grace period bounds the save.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence

from mwms_trainer import system_metrics, worker_log

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
KILL_AFTER_SECONDS = 2  # well inside the 5 s a deleted pod may take to go
KILLED_MESSAGE = "pid1: the child was still running {seconds} s after the signal; sent SIGKILL"
SAVING_MESSAGE = "pid1: the child is saving its checkpoint: not killed (the pod's grace period bounds it)"
# The write end of a pipe to the parent, in the child's environment: one byte asks for the grace period.
GRACE_FD_VARIABLE = "MWMS_PID1_GRACE_FD"


def ask_for_grace() -> bool:
    """In the child: ask PID 1 not to kill this process after a forwarded signal (it is saving); False where
    no PID 1 of ours listens (a local run, a test, a container with an init of its own)."""
    fd = os.environ.get(GRACE_FD_VARIABLE, "")
    if not fd.isdigit():
        return False
    try:
        os.write(int(fd), b"g")
    except OSError:
        return False
    return True


def _granted(read_fd: int | None) -> bool:
    """Whether the child asked for the grace period (a byte waits in the pipe); never blocks."""
    if read_fd is None:
        return False
    try:
        return bool(os.read(read_fd, 64))
    except BlockingIOError:
        return False


def exit_code(status: int) -> int:
    """A wait status as a shell (and the kubelet) reports it: the exit code, or 128 + the signal."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def supervise(
    child: int,
    on_signalled: Callable[[int], None] = lambda _: None,
    grace_fd: int | None = None,
    forwarded: list[int] | None = None,
) -> int:
    """Forward signals to `child` and reap every process until it exits; return its exit code.

    Call with FORWARDED blocked (the handlers are installed here, then the signals let through, so one sent
    right after the fork is not lost). `on_signalled(code)` runs when the child was ended by a signal after
    one was forwarded to it. `grace_fd`: the read end of the child's ask_for_grace pipe (non-blocking).
    `forwarded` collects the signals forwarded.
    Returns 128 + the first signal forwarded when the child was ended by a signal after it, else the child's
    own exit code (128 + N for a child ended by signal N).
    """

    forwarded = [] if forwarded is None else forwarded
    saving: list[bool] = []

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            return
        forwarded.append(signum)
        signal.alarm(KILL_AFTER_SECONDS)

    def kill(_signum: int, _frame: object) -> None:
        if saving or _granted(grace_fd):
            if not saving:
                saving.append(True)
                print(SAVING_MESSAGE, file=sys.stderr, flush=True)
            return
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            return
        print(KILLED_MESSAGE.format(seconds=KILL_AFTER_SECONDS), file=sys.stderr, flush=True)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.signal(signal.SIGALRM, kill)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # any child: orphans re-parented to PID 1 are reaped too
        except ChildProcessError:  # the child is gone and was reaped elsewhere: nothing left to wait for
            return 1
        if pid == child:
            signal.alarm(0)
            if not (os.WIFSIGNALED(status) and forwarded):
                return exit_code(status)  # ended on its own (SIGALRM's backstop, say): its own message stands
            code = 128 + forwarded[0]
            on_signalled(code)
            return code


def _fork() -> tuple[int, int]:
    """fork() with FORWARDED blocked in the parent until supervise() has its handlers; the child unblocks.
    (child pid, the read end of the child's ask_for_grace pipe); in the child (0, -1)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    child = os.fork()
    if child == 0:
        os.close(read_fd)
        os.set_inheritable(write_fd, True)  # also for a command exec'd in its place
        os.environ[GRACE_FD_VARIABLE] = str(write_fd)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        return 0, -1
    os.close(write_fd)
    return child, read_fd


def fork_unless_pid1_is_taken(
    on_signalled: Callable[[int], None] = lambda _: None, capture: worker_log.Capture | None = None
) -> int | None:
    """As PID 1: fork; the parent supervises (keeping the child's log in `capture`, uploaded once the child
    has exited) and returns the child's exit code, the child returns None.

    Not PID 1 (a local run, a test, a container with an init already): returns None at once, nothing forked
    and no log kept (a local run's workers write to your terminal or their files).
    """
    if os.getpid() != 1:
        return None
    if capture is not None:
        capture.open()
    child, grace_fd = _fork()
    if child == 0:
        if capture is not None:
            capture.in_child()
        return None
    return _supervise_with_companions(child, on_signalled, capture, grace_fd)


def _supervise_with_companions(
    child: int, on_signalled: Callable[[int], None], capture: worker_log.Capture | None, grace_fd: int
) -> int:
    """supervise(), with the worker's log kept (capture) and its system metrics sampled meanwhile."""
    metrics = system_metrics.reporter(os.environ)
    if capture is not None:
        capture.in_parent()
    if metrics is not None:
        metrics.start()
    forwarded: list[int] = []
    code = supervise(child, on_signalled, grace_fd, forwarded)
    stopped = bool(forwarded)  # told to stop: what goes up goes quickly, within the grace period
    if metrics is not None:
        metrics.stop(final=not stopped)
    if capture is not None:
        capture.finish(stopped=stopped)
    return code


def main(argv: Sequence[str]) -> int:
    """python -m mwms_trainer.pid1 CMD [ARG...]: run CMD as a child that SIGTERM ends promptly."""
    if not argv:
        print("usage: python -m mwms_trainer.pid1 CMD [ARG...]", file=sys.stderr)
        return 2
    capture = _capture_wanted()
    if capture is not None:
        capture.open()
    child, grace_fd = _fork()
    if child == 0:
        if capture is not None:
            capture.in_child()
        try:
            os.execvp(argv[0], list(argv))
        except OSError as e:
            print(f"cannot run {argv[0]!r}: {e}", file=sys.stderr)
        os._exit(127)
    return _supervise_with_companions(child, lambda _: None, capture, grace_fd)


def _capture_wanted() -> worker_log.Capture | None:
    """The log of a job's worker goes to its MLflow run (worker_log.py); None for any other process."""
    return worker_log.Capture(os.environ) if worker_log.wanted(os.environ) else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
