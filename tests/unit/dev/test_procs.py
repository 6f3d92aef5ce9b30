"""stop_process (mwms_dev.procs) on real short-lived processes: one that exits on SIGTERM is left to exit, one
that ignores SIGTERM is killed once its grace is over, one that has exited is only reaped."""

import os
import signal
import subprocess
import sys

from mwms_dev.procs import stop_process

# The child says "ready" once its SIGTERM handler is in place, then sleeps until it is signalled. It unblocks
# SIGTERM first: a child inherits the signal mask of the thread that started it, and what is tested here is
# stop_process, not the test process's mask (in one cold CI run, at load ~11, the first test's child outlived
# its 60 s grace; it says on stderr if it found SIGTERM blocked).
CHILD = """\
import signal, sys, time
if signal.SIGTERM in signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGTERM}}):
    print("the child inherited SIGTERM blocked", file=sys.stderr, flush=True)
{handler}
print("ready", flush=True)
time.sleep(120)
"""


def started(handler: str) -> subprocess.Popen[bytes]:
    code = CHILD.format(handler=handler)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"  # blocks until the handler is installed
    return proc


def test_a_process_that_exits_on_sigterm_is_left_to_exit_its_own_way():
    proc = started("signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))")

    stop_process(proc, grace=60)

    assert proc.returncode == 3  # its handler ran: terminated, not killed


def test_a_process_that_ignores_sigterm_is_killed_after_its_grace():
    proc = started("signal.signal(signal.SIGTERM, signal.SIG_IGN)")

    stop_process(proc, grace=0.5)

    assert proc.returncode == -signal.SIGKILL


def test_a_process_that_has_exited_is_reaped_and_keeps_its_exit_code():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # until it has exited, leaving it unreaped

    stop_process(proc, grace=60)

    assert proc.returncode == 4
