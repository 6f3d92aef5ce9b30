"""Results are appended, never rewritten, and the page shows for each row the newest plain record that has
its figures, with that record's line, machine and commit."""

from __future__ import annotations

from pathlib import Path

from mwms_bench import results


def record(date: str, p95: float | None, label: str = "", pods: int = 1000) -> dict:
    figures = {"burst": {"to_all_running": {"p50": 1.0, "p95": p95}}} if p95 is not None else {"churn": {}}
    provenance = {
        "commit": "abc1234",
        "date": date,
        "cpus": 2,
        "loadavg": [1.5, 1, 1],
        "loadavg_end": [2, 1, 1],
    }
    return {
        "scenario": "scale",
        "label": label,
        "params": {"pods": pods},
        "figures": figures,
        "provenance": provenance,
    }


def test_a_row_shows_the_newest_plain_record_that_has_its_figures(tmp_path: Path):
    records = [record("2026-12-01", 9.0), record("2026-12-03", 7.0), record("2026-12-04", 1.0, "before")]
    for r in records + [record("2026-12-05", None), record("2026-12-06", 2.0, pods=5000)]:
        results.append(r, tmp_path)
    assert results.read("scale", tmp_path)[:3] == records  # in the order appended
    row = results.Row(
        "to Running p50 / p95", "", "burst.to_all_running.p50 .p95", unit="s", where={"pods": 1000}
    )
    rows = results.render_table(
        results.Table("Scale", "scale", "python -m mwms_bench scale", [row]), tmp_path
    )
    assert rows[-2] == (
        "| to Running p50 / p95 |  | 1 / 7 s | 2 CPUs, load 1.5–2, 2026-12-03 | abc1234 "
        "| [scale:2](../bench/results/scale.jsonl#L2) |"
    )
    before = results.Row("before", "", "burst.to_all_running.p95", label="before")
    assert "| 1 |" in results.render_table(results.Table("S", "scale", "c", [before]), tmp_path)[-2]
