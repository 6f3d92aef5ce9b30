"""SIGTERM before the group's save ends: the note that stays when the kubelet kills the worker at the end of
its grace period (the save did not finish) is written at once, and names where the next group resumes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mwms_contract import termination
from mwms_trainer import pid1
from mwms_trainer.group_checkpoint import GroupCheckpoint, ResumePoint


def group_checkpoint(tmp_path: Path, resume: ResumePoint) -> GroupCheckpoint:
    store: Any = None  # on_sigterm neither saves nor publishes
    return GroupCheckpoint(
        directory=str(tmp_path / "checkpoint"),
        store=store,
        is_chief=True,
        rank=0,
        steps_per_epoch=10,
        every_steps=None,
        resume=resume,
        stop=store,
        termination_log=str(tmp_path / "termination-log"),
    )


@pytest.mark.parametrize(
    ("resume", "resumes_from"),
    [
        (ResumePoint(epoch=1, step=5, found=True), "its last complete checkpoint, epoch 2 step 5"),
        (ResumePoint(), "the start (none was saved)"),
    ],
)
def test_sigterm_leaves_a_retryable_note_naming_where_the_next_group_resumes(tmp_path, resume, resumes_from):
    group_checkpoint(tmp_path, resume).on_sigterm()

    kind, what = termination.parse_failure((tmp_path / "termination-log").read_text()) or ("", "")
    assert kind == termination.RETRYABLE
    assert what.startswith(termination.SAVE_UNFINISHED)
    assert "spec.checkpoint.terminationGracePeriodSeconds" in what
    assert what.endswith(f"the next group resumes from {resumes_from}")


def test_sigterm_asks_pid1_for_the_grace_period(tmp_path, monkeypatch):
    read, write = os.pipe()
    monkeypatch.setenv(pid1.GRACE_FD_VARIABLE, str(write))
    try:
        group_checkpoint(tmp_path, ResumePoint()).on_sigterm()
        assert os.read(read, 64) == b"g"
    finally:
        os.close(read)
        os.close(write)
