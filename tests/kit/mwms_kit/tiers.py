"""Per-tier accounting for every pytest run: a tier is the folder under tests/ (unit, static, tf, images,
integration, node, e2e). At the end of a run each tier's passed/failed/skipped counts and its wall time (first
test's start to last test's end) are printed, and written as JSON to $MWMS_TIER_REPORT when it is set (so
hack/run-tests.py can add up the lanes it runs side by side).

Under CI (`CI` set, not "false"/"0") a test that skips fails instead, naming its tier and the reason: a tier
that cannot run (no root, no containerd, no images) must never leave a green run in which it did not run.
Expected failures (xfail) are not skips and stay as they are."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

TIERS = ("unit", "static", "tf", "images", "scale", "integration", "node", "e2e")


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def tier_of(nodeid: str) -> str:
    """`tests/<tier>/...::test` -> tier; anything else (a test file at tests/ itself) is `other`."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


@dataclass
class TierCount:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    started: float = 0.0  # epoch seconds of the first phase that ran
    ended: float = 0.0

    @property
    def wall_seconds(self) -> float:
        return max(0.0, self.ended - self.started)

    def add(self, report: pytest.TestReport) -> None:
        self.started = min(self.started or report.start, report.start)
        self.ended = max(self.ended, report.stop)
        if report.when == "call":
            if report.passed and not hasattr(report, "wasxfail"):
                self.passed += 1
            elif report.failed:
                self.failed += 1
            else:  # skipped, or an expected failure
                self.skipped += 1
        elif report.failed:  # a fixture failed in setup or teardown
            self.errors += 1
        elif report.skipped and report.when == "setup":
            self.skipped += 1


def fail_skips_under_ci(report: pytest.TestReport) -> None:
    """Turn a skip into a failure under CI, keeping the skip's reason in the message."""
    if not (under_ci() and report.skipped and not hasattr(report, "wasxfail")):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"CI is set, and under CI a tier that cannot run fails instead of skipping: the "
        f"{tier_of(report.nodeid)} tier could not run {report.nodeid}: {reason}"
    )


class TierReport:
    """The pytest plugin: counts reports per tier, prints the table, writes $MWMS_TIER_REPORT."""

    def __init__(self) -> None:
        self.tiers: dict[str, TierCount] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> object:
        outcome = yield
        fail_skips_under_ci(outcome.get_result())  # type: ignore[attr-defined]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> object:
        """A module that skips as a whole (importorskip, allow_module_level) fails under CI too."""
        outcome = yield
        report = outcome.get_result()  # type: ignore[attr-defined]
        if under_ci() and report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            report.outcome = "failed"
            report.longrepr = (
                f"CI is set, and under CI a tier that cannot run fails instead of skipping: the "
                f"{tier_of(report.nodeid)} tier could not collect {report.nodeid}: {reason}"
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.tiers.setdefault(tier_of(report.nodeid), TierCount()).add(report)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.tiers:
            return
        terminalreporter.section("tiers")
        for line in table({name: asdict(count) for name, count in self.tiers.items()}):
            terminalreporter.write_line(line)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = os.environ.get("MWMS_TIER_REPORT")
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(json.dumps({n: asdict(c) for n, c in self.tiers.items()}, indent=1))


def table(tiers: dict[str, dict[str, float]]) -> list[str]:
    """Rows `tier  passed  failed  errors  skipped  wall`, in tier order, from TierCount dicts."""
    order = [t for t in TIERS if t in tiers] + sorted(set(tiers) - set(TIERS))
    rows = [f"{'tier':<12}{'passed':>8}{'failed':>8}{'errors':>8}{'skipped':>8}{'wall':>10}"]
    for name in order:
        c = tiers[name]
        wall = max(0.0, c["ended"] - c["started"])
        rows.append(
            f"{name:<12}{c['passed']:>8}{c['failed']:>8}{c['errors']:>8}{c['skipped']:>8}"
            f"{f'{wall / 60:.1f} min':>10}"
        )
    return rows
