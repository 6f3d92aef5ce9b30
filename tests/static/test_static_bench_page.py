"""docs/benchmarks.md is a results page, not a notebook: `python -m mwms_bench report` renders it from the
committed bench/results/ records, and it stays short."""

from __future__ import annotations

from static_support import REPO

from mwms_bench import results

PAGE = REPO / "docs" / "benchmarks.md"


def test_the_results_page_is_rendered_from_the_committed_results():
    assert results.render() == PAGE.read_text(), (
        "docs/benchmarks.md is stale: run `python -m mwms_bench report`"
    )


def test_the_results_page_is_at_most_200_lines():
    lines = PAGE.read_text().count("\n")
    assert lines <= 200, f"docs/benchmarks.md has {lines} lines: a results page, not a lab notebook"


def test_every_row_shows_figures_of_ours():
    rows = [line.split(" | ") for line in PAGE.read_text().splitlines() if line.startswith("| ")]
    missing = [cells[0] for cells in rows if cells[2] == "not measured"]
    assert missing == [], "rows whose figures no record has: fix bench/mwms_bench/page.yaml"
