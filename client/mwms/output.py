"""What `mwms` prints: kubectl's table (AGE, -o wide), -o json|yaml|name|jsonpath|custom-columns, and the
rows of -w."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
from typing import IO, Any

import yaml

import mwms.kubectl as kubectl
from mwms.jobs import Job
from mwms_contract.status import RUN_KEYS, Progress, parse_time


def age(created: str | None, now: datetime.datetime) -> str:
    """kubectl's AGE: 45s, 12m, 3h, 2d."""
    moment = parse_time(created)
    if moment is None:
        return "<unknown>"
    seconds = int((now - moment).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def duration(seconds: int) -> str:
    """A time left for people: 45s, 3m20s, 1h05m."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def progress_text(progress: Progress) -> str:
    """`epoch 12/60 (20%), 3m20s left`: as far as the status knows."""
    text = f"epoch {progress.epoch}/{progress.epochs or '?'}"
    if progress.percentage is not None:
        text += f" ({progress.percentage}%)"
    if progress.remaining_seconds is not None:
        text += f", {duration(progress.remaining_seconds)} left"
    return text


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl's look)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def progress_cells(progress: Progress | None) -> list[str]:
    """EPOCH, PROGRESS and TIME LEFT of a job's row."""
    if progress is None or progress.epoch is None:
        return ["<none>", "<none>", "<none>"]
    epoch = f"{progress.epoch}/{progress.epochs}" if progress.epochs else str(progress.epoch)
    percent = "<none>" if progress.percentage is None else f"{progress.percentage}%"
    left = "<none>" if progress.remaining_seconds is None else duration(progress.remaining_seconds)
    return [epoch, percent, left]


def job_rows(
    jobs: Sequence[Job], wide: bool, all_namespaces: bool, now: datetime.datetime, progress: bool = False
) -> str:
    """kubectl's table; `progress` (`mwms get`) or `wide` adds EPOCH, PROGRESS and TIME LEFT."""
    head = ["NAME", "REPLICAS", "PHASE", "RESTARTS", "RUN ID", "AGE"]
    head = (["NAMESPACE"] if all_namespaces else []) + head
    head += ["EPOCH", "PROGRESS", "TIME LEFT"] if wide or progress else []
    head += ["MODEL URI", "MESSAGE"] if wide else []
    rows = [head]
    for job in jobs:
        row = [job.name, str(job.replicas), job.phase, str(job.restarts), job.mlflow.run_id or "<none>"]
        row = ([job.namespace] if all_namespaces else []) + row + [age(job.created, now)]
        row += progress_cells(job.progress) if wide or progress else []
        if wide:
            row += [job.mlflow.model_uri or "<none>", job.message.splitlines()[0] if job.message else ""]
        rows.append(row)
    return table(rows)


def dump(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=True)
    return yaml.safe_dump(data, sort_keys=True).rstrip("\n")


def show_jobs(
    jobs: Sequence[Job],
    output: str | None,
    out: IO[str],
    all_namespaces: bool = False,
    single: bool = False,
    progress: bool = False,
) -> None:
    """`-o` as kubectl: the object itself for one named job (`single`), else a v1 List; `name`:
    trainjob.mwms.dev/NAME; `wide`: the table with progress, model and message (`progress`: with
    progress)."""
    if output in ("json", "yaml"):
        items = [job.raw for job in jobs]
        out.write(dump(items[0] if single else {"apiVersion": "v1", "kind": "List", "items": items}, output))
    elif output and output.startswith("jsonpath="):  # kubectl's: over the object, or over the List
        items = [job.raw for job in jobs]
        out.write(kubectl.render(output[9:], items[0] if single else {"kind": "List", "items": items}))
    elif output and output.startswith("custom-columns="):
        out.write(table(kubectl.custom_columns(output[15:], [job.raw for job in jobs])))
    elif output == "name":
        out.write("\n".join(f"trainjob.mwms.dev/{job.name}" for job in jobs))
    elif not jobs:
        out.write("No TrainJobs found.")
    else:
        now = datetime.datetime.now(datetime.UTC)
        out.write(job_rows(jobs, output == "wide", all_namespaces, now, progress))
    out.write("\n")


def run_fields(job: Job) -> dict[str, Any]:
    """`mwms runs -o json`: the job and its status.mlflow, each key shown (null when not known yet)."""
    run = {key: getattr(job.mlflow, name) for name, key in RUN_KEYS.items()}
    return {"name": job.name, "namespace": job.namespace, "phase": job.phase, **run}


def show_watched(
    jobs: Iterable[Job], output: str | None, out: IO[str], all_namespaces: bool, progress: bool = False
) -> None:
    """`-w`: a line (or an object) for each change, as it comes; the table's rows without its header."""
    for job in jobs:
        if output is None or output == "wide":
            now = datetime.datetime.now(datetime.UTC)
            row = job_rows([job], output == "wide", all_namespaces, now, progress).splitlines()[1]
            out.write(row + "\n")
        else:
            show_jobs([job], output, out, single=True)
        out.flush()
