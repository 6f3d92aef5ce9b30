"""docs/reliability.md is half generated (bench/chaos/run.py's fault experiments) and half written by hand
(the failure modes a user can meet): a rerun of the experiments must keep the hand-written half."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from static_support import REPO

from mwms_kit import modules


def _chaos_run():
    return modules.load("mwms_chaos_run", "bench/chaos/run.py")


def test_the_committed_doc_has_its_hand_written_part():
    run = _chaos_run()
    assert "# Failure modes and what you see" in run.hand_written_part(
        (REPO / "docs" / "reliability.md").read_text()
    )


def test_rewriting_the_experiments_keeps_the_hand_written_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    run = _chaos_run()
    doc = tmp_path / "reliability.md"
    doc.write_text(
        f"# Reliability: old numbers\n\n| stale |\n\n{run.HAND_WRITTEN}\n\n# Failure modes\n\n- kept\n"
    )
    monkeypatch.setattr(run, "DOC", doc)
    run.write_doc(json.loads((REPO / "bench" / "results" / "chaos.json").read_text()))
    text = doc.read_text()
    assert "| stale |" not in text and "| worker-kill |" in text
    assert text.endswith(f"{run.HAND_WRITTEN}\n\n# Failure modes\n\n- kept\n")
