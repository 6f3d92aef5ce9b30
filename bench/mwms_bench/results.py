"""Results, and docs/benchmarks.md rendered from them. A run's record, one JSON line appended to
bench/results/<scenario>.jsonl and never rewritten: `scenario`, `label` (names a comparison; "" for a plain
run), `command`, `params`, `figures`, `error` (why it ended early, beside what it had measured) and
`provenance`: commit (and changes beside it), date, CPUs, machine, load average at the start and the end.
Records converted from the older results files say "unknown" where a field was not recorded. The page's
tables: page.yaml; each row shows the newest record of its scenario that matches the row's parameters and
has its figures (a labelled record only where a row names the label), with its line, machine and commit."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(os.environ.get("MWMS_BENCH_RESULTS", REPO / "bench" / "results"))  # elsewhere for a trial run


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def machine() -> str:
    """The CPU model and the kernel, e.g. 'AMD EPYC 7B13, Linux 6.1'."""
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if "model name" in line), "unknown CPU")
    return f"{model}, {platform.system()} {platform.release().split('-')[0]}"


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def provenance() -> dict[str, Any]:
    out = {
        "commit": _git("rev-parse", "--short=9", "HEAD") or "unknown",
        "date": now(),
        "cpus": os.cpu_count(),
    }
    out["dirty"] = bool(_git("status", "--porcelain", "--untracked-files=no"))  # changes beside the commit
    return out | {"machine": machine(), "python": platform.python_version(), "loadavg": loadavg()}


def path(scenario: str, results: Path = RESULTS) -> Path:
    return results / f"{scenario}.jsonl"


def append(record: dict[str, Any], results: Path = RESULTS) -> Path:
    """Add one record to its scenario's file (created on first use)."""
    target = path(record["scenario"], results)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
    return target


def read(scenario: str, results: Path = RESULTS) -> list[dict[str, Any]]:
    """Every record of a scenario, oldest first as appended."""
    target = path(scenario, results)
    return [json.loads(line) for line in target.read_text().splitlines()] if target.exists() else []


def figure(record: dict[str, Any], dotted: str) -> Any:
    """A figure by its dotted path (`burst.to_all_running.p95`); None where the record has none."""
    value: Any = record.get("figures", {})
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


PAGE = REPO / "docs" / "benchmarks.md"
SPEC = Path(__file__).with_name("page.yaml")


@dataclass(frozen=True)
class Row:
    metric: str
    target: str
    ours: str | list[str]  # dotted paths of figures; ".x" is relative to the previous one's parent
    peer: str | list[str] | None = None  # the same for the peer's column; "=" is ours' paths
    unit: str = ""
    where: dict[str, Any] = field(default_factory=dict)  # parameters the record must have
    label: str = ""


@dataclass(frozen=True)
class Table:
    title: str
    scenario: str
    command: str
    rows: list[Row]
    where: dict[str, Any] = field(default_factory=dict)  # parameters of every row's records
    peer_where: dict[str, Any] | None = None  # the peer's records: ours' with these parameters changed


def paths(spec: str | list[str]) -> list[str]:
    """A row's figures: dotted paths (a string of them separated by spaces, or a list)."""
    out: list[str] = []
    for part in spec.split() if isinstance(spec, str) else spec:
        out.append(out[-1].rsplit(".", 1)[0] + part if part.startswith(".") else part)
    return out


def show(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(show(v) for v in value)
    if isinstance(value, str):
        return value
    if isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


Found = tuple[int, dict[str, Any]] | None  # a record and its line in its file


def pick(records: list[tuple[int, dict]], where: dict[str, Any], label: str, wanted: list[str]) -> Found:
    """The newest record matching `where` and `label` that has every wanted figure."""

    def fits(r: dict[str, Any]) -> bool:
        has = all(figure(r, p) is not None for p in wanted)
        return r.get("label", "") == label and all(r["params"].get(k) == v for k, v in where.items()) and has

    found = [(line, r) for line, r in records if fits(r)]
    return max(found, key=lambda lr: lr[1]["provenance"]["date"], default=None)


def cell(found: Found, wanted: list[str], unit: str) -> str:
    if found is None:
        return "not measured"
    return " / ".join(show(figure(found[1], p)) for p in wanted) + (f" {unit}" if unit else "")


def where_run(record: dict[str, Any]) -> str:
    """CPUs, the load average (1 min) at the start and the end ("?": not recorded), and the date."""
    p = record["provenance"]
    load = [f"{x[0]:g}" if isinstance(x, list) else "?" for x in (p.get("loadavg"), p.get("loadavg_end"))]
    return f"{p.get('cpus', '?')} CPUs, load {'–'.join(load)}, {str(p['date'])[:10]}"


def render_table(table: Table, results_dir: Path) -> list[str]:
    records = list(enumerate(read(table.scenario, results_dir), start=1))
    compared = table.peer_where is not None
    head = ["metric", "target", "ours"] + ["training-operator"] * compared + ["machine", "commit", "raw"]
    lines = [f"### {table.title}", "", f"`{table.command}`", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table.rows:
        where = table.where | row.where
        ours = pick(records, where, row.label, paths(row.ours))
        cells = [row.metric, row.target, cell(ours, paths(row.ours), row.unit)]
        raw = [ours] if ours else []
        if compared:
            wanted = paths(row.ours if row.peer == "=" else row.peer or "")
            theirs = pick(records, where | (table.peer_where or {}), row.label, wanted) if row.peer else None
            cells.append(cell(theirs, wanted, row.unit) if row.peer else "")
            raw += [theirs] if theirs and theirs != ours else []
        if ours is None:
            cells += ["", "", ""]
        else:
            provenance, file = ours[1]["provenance"], f"../bench/results/{table.scenario}.jsonl"
            commit = provenance["commit"] + ("+" if provenance.get("dirty") is True else "")  # + : changes
            links = ", ".join(f"[{table.scenario}:{line}]({file}#L{line})" for line, _ in raw)
            cells += [where_run(ours[1]), commit, links]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def render(results_dir: Path = RESULTS, spec: Path = SPEC) -> str:
    page = yaml.safe_load(spec.read_text())
    lines = page["header"].strip().splitlines() + [""]
    for section, tables in page["sections"].items():
        lines += [f"## {section}", ""]
        for table in tables:
            rows = [Row(**row) for row in table.pop("rows")]
            lines += render_table(Table(**table, rows=rows), results_dir)
    return "\n".join(lines + page["footer"].strip().splitlines()) + "\n"


def main() -> int:
    page = render()
    PAGE.write_text(page)
    print(f"wrote {PAGE} ({len(page.splitlines())} lines)", file=sys.stderr)
    return 0
