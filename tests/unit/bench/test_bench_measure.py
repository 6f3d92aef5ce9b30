"""The machine's busy CPU counts every state but idle and iowait, in seconds."""

from __future__ import annotations

import os

from mwms_bench import measure

STAT = "cpu  100 20 30 4000 500 6 7 8 9 10\ncpu0 50 10 15 2000 250 3 3 4 4 5\n"


def test_busy_seconds_leave_out_idle_and_iowait():
    ticks = os.sysconf("SC_CLK_TCK")
    assert measure.machine_busy_seconds(STAT) == (100 + 20 + 30 + 6 + 7 + 8) / ticks


def test_busy_seconds_of_this_machine_grow_with_work():
    before = measure.machine_busy_seconds()
    sum(i * i for i in range(3_000_000))
    assert measure.machine_busy_seconds() > before


def test_a_command_is_named_by_its_program_or_its_python_module_or_script():
    assert measure.command_label(["/usr/bin/kube-apiserver", "--etcd-servers=x"]) == "kube-apiserver"
    trainer = ["/x/.venv/bin/python3", "-u", "-m", "mwms_trainer", "--x"]
    assert measure.command_label(trainer) == "python -m mwms_trainer"
    assert measure.command_label(["python3.11", "hack/ci/run-tests.py"]) == "python run-tests.py"
    assert measure.command_label(["python", "-c", "print()"]) == "python -c"
    assert measure.command_label(["python"]) == "python"


def test_cpu_by_command_counts_what_a_child_spends_after_the_start_only():
    import subprocess
    import sys

    # The child spins 1.5 s of CPU, says so, then waits to be read before it exits.
    spin = "import sys, time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass\n"
    spin += "print('spun', flush=True)\nsys.stdin.read()"
    by_command = measure.CpuByCommand(interval=3600).start()
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    child = subprocess.Popen([sys.executable, "-c", spin], **pipes)
    assert child.stdout.readline() == "spun\n"
    by_command.read_all()
    child.communicate("")
    minutes = by_command.stop().minutes(top=50, digits=4)
    assert 1.4 < minutes["python -c"] * 60 < 30, minutes
