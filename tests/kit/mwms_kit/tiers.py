"""Tiers: a test's tier is the folder under tests/ it lives in (unit, static, tf, images, scale,
integration, node, e2e, kind, multikueue); this pytest plugin gives every test its tier's marker, so `-m`
and paths agree.

At the end of a session each tier's passed/failed/skipped counts and wall time are printed, and written as
JSON to $MWMS_TIER_REPORT when set (mwms_kit.runner adds up the sessions it runs side by side).

Under CI (`CI` set, not "false"/"0") a test that skips fails instead, naming its tier and the reason: a tier
that cannot run must never leave a green run in which it did not run. A module that skips as a whole fails
as one test of its own, so the session goes on with every other module. Expected failures stay as they are.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "static", "tf", "images", "scale", "integration", "node", "e2e", "kind", "multikueue")


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
    report.outcome = "failed"
    report.longrepr = could_not_run(report.nodeid, "run", report.longrepr)


def could_not_run(nodeid: str, what: str, longrepr: object) -> str:
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return (
        f"CI is set, and under CI a tier that cannot run fails instead of skipping: the "
        f"{tier_of(nodeid)} tier could not {what} {nodeid}: {reason}"
    )


class SkippedWhole(pytest.Item):
    """Stands, under CI, for a module that skipped as a whole: one failing test with the skip's reason."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise AssertionError(self.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return self.message

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class Tiers:
    """The pytest plugin: marks each test with its tier, fails skips under CI, counts reports per tier, prints
    the table and writes $MWMS_TIER_REPORT."""

    def __init__(self) -> None:
        self.tiers: dict[str, TierCount] = {}

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        tier = tier_of(item.nodeid)
        if tier in TIERS:
            item.add_marker(tier)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> object:
        outcome = yield
        fail_skips_under_ci(outcome.get_result())  # type: ignore[attr-defined]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> object:
        """A module that skips as a whole (importorskip, allow_module_level) becomes, under CI, one failing
        test in its place: a failed collection would stop the whole session."""
        outcome = yield
        report = outcome.get_result()  # type: ignore[attr-defined]
        if under_ci() and report.skipped:
            message = could_not_run(report.nodeid, "collect", report.longrepr)
            stand_in = SkippedWhole.from_parent(collector, name="skipped-whole", message=message)
            report.outcome, report.longrepr, report.result = "passed", None, [stand_in]

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
