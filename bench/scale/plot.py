"""The scale bench's plot (bench/scale_bench.py): how each cost of a create burst grows with the number of
worker pods, one point per size run (bench/results/scale.json), one row per job size (workers a job);
training-operator's runs, where there are any (dashed, squares), and ours run right after them (dotted,
crosses), beside ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# the burst's p95 figures drawn, and their labels
BURST = {
    "to_all_bound": "create -> bound p95",
    "to_all_running": "create -> Running p95",
    "to_pods_created_operator": "operator p95",
    "pods_created_to_bound_scheduler": "scheduler p95",
}


def plot(
    results: dict[str, Any],
    path: Path,
    peer: dict[str, Any] | None = None,
    beside: dict[str, Any] | None = None,
) -> str | None:
    """Ours' figures against their number of pods, the peer's and ours' runs beside the peer's (back to back)
    where given, as a PNG at `path`; None, or why there is none."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    sizes = sorted({r["params"]["replicas"] for r in (*results.values(), *(peer or {}).values())}) or [4]
    figure, rows = plt.subplots(len(sizes), 4, figsize=(20, 4.5 * len(sizes)), squeeze=False)
    for replicas, axes in zip(sizes, rows, strict=True):
        series = (
            ("", results, "-o"),
            (" (training-operator)", peer or {}, "--s"),
            (" (ours beside it)", beside or {}, ":x"),
        )
        for name, entries, style in series:
            runs = sorted(
                (r for r in entries.values() if r["params"]["replicas"] == replicas),
                key=lambda r: r["params"]["pods"],
            )
            if runs:
                _draw(axes, runs, name, style)
        titles = ("create burst", "operator API requests", "operator RSS", "operator CPU")
        for ax, title, unit in zip(axes, titles, ("seconds", "per job", "MiB", "CPU-seconds"), strict=True):
            ax.set(
                xlabel="worker pods",
                ylabel=unit,
                title=f"{title}, jobs of {replicas}",
                xscale="log",
                ylim=(0, None),
            )
            ax.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    return None


def _draw(axes: Any, runs: list[dict[str, Any]], name: str, style: str) -> None:
    """One operator's runs of one job size, a line per figure; a figure's colour is the same for both
    operators."""
    pods = [r["params"]["pods"] for r in runs]
    for i, (key, label) in enumerate(BURST.items()):
        p95 = [r["burst"][key].get("p95") for r in runs]
        axes[0].plot(pods, p95, style, color=f"C{i}", label=label + name)
    for i, key in enumerate(("total", "writes")):
        per_job = [r["api"]["operator_per_job"][key] for r in runs]
        axes[1].plot(pods, per_job, style, color=f"C{i}", label=key + name)
    rss = [r["burst"]["footprint_all_running"]["rss_mib"] for r in runs]
    axes[2].plot(pods, rss, style, color="C0", label="RSS, all Running" + name)
    cpu = [r["burst"]["operator_cpu_s"] / r["burst"]["jobs"] * 1000 for r in runs]
    axes[3].plot(pods, cpu, style, color="C0", label="burst, per 1,000 jobs" + name)
