"""The `mwms logs`, `describe`, `events` and `ui` verbs: their arguments and output (mwms.cli wires them)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import threading
from collections.abc import Callable
from typing import IO, Any

import mwms.describe as describe
from mwms.follow import POD_RUNNING_TIMEOUT
from mwms.kube import SubmitError
from mwms.sdk import Client
from mwms_contract import names

LOGS_HELP = (
    "print a worker's log (default: the chief's), from its pod while it lives, from the job's MLflow run "
    "after (every worker uploads its log when it exits)"
)
DESCRIBE_HELP = (
    "show a TrainJob: its conditions, each worker's state and last reason, recent events, the run (what is "
    "gone, from the post-mortem kept in the run; --run RUN_ID once the TrainJob itself is deleted)"
)
EVENTS_HELP = "list the Events of a TrainJob and of its pods, oldest first (once gone, those kept in its run)"
UI_HELP = (
    "the job's run in the MLflow UI: its URL, served on a local port through the API server's service proxy "
    "when this machine does not reach the tracking server (until Ctrl-C, as kubectl port-forward)"
)
TRACKING_URI_HELP = (
    "the MLflow tracking server to read the run from (default: MLFLOW_TRACKING_URI, else the one the job "
    "names, through the API server's service proxy when it is a Service this machine does not reach)"
)


def tracking_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", metavar="URI", help=TRACKING_URI_HELP)


def logs_arguments(logs: argparse.ArgumentParser, seconds: Callable[[str], float]) -> None:
    logs.add_argument("name")
    which = logs.add_mutually_exclusive_group()
    which.add_argument(
        "--worker", type=int, default=0, metavar="I", help="worker I's log (default 0, the chief)"
    )
    which.add_argument(
        "--all", dest="all_workers", action="store_true", help="every worker's, each line prefixed [worker-I]"
    )
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines (of each worker's log)")
    group = logs.add_mutually_exclusive_group()
    group.add_argument(
        "--group",
        type=int,
        metavar="K",
        help="the log of the group's K-th (re)start (0: the first; default: the current one)",
    )
    group.add_argument(
        "--previous", "-p", action="store_true", help="the log of the group before the current one"
    )
    logs.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="stream the running group's log until the container ends (or its pod is replaced by a new "
        "group, or the job deleted: it says so); a finished group's log is printed as it is",
    )
    logs.add_argument(
        "--pod-running-timeout",
        type=seconds,
        default=POD_RUNNING_TIMEOUT,
        help="with -f: how long to wait for the container to start (default 5m; exit 1 after)",
    )
    tracking_argument(logs)


def describe_arguments(describe: argparse.ArgumentParser) -> None:
    describe.add_argument("name", nargs="?", help="the TrainJob (or --run)")
    describe.add_argument(
        "--run",
        dest="run_id",
        metavar="RUN_ID",
        help="a job known by its MLflow run, after the TrainJob itself is deleted",
    )
    tracking_argument(describe)


def ui_arguments(ui: argparse.ArgumentParser) -> None:
    ui.add_argument("name")
    ui.add_argument("--port", type=int, default=0, help="the local port (default: a free one)")
    ui.add_argument(
        "--address", default="127.0.0.1", help="the local address to listen on (default 127.0.0.1)"
    )
    tracking_argument(ui)


def run_logs(client: Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    def say(line: str) -> None:  # what it waits for, and why the log ended: on stderr, apart from the log
        out.flush()
        err.write(f"mwms logs: {line}\n")
        err.flush()

    lines = client.logs(
        args.name,
        follow=args.follow,
        pod_running_timeout=args.pod_running_timeout,
        say=say,
        worker=args.worker,
        all_workers=args.all_workers,
        group=args.group,
        previous=args.previous,
        tail=args.tail,
        tracking_uri=args.tracking_uri,
    )
    for line in lines:
        out.write(line + "\n")
        out.flush()
    return names.CLI_EXIT_OK


def run_describe(
    client: Client, args: argparse.Namespace, out: IO[str], dump: Callable[[Any, str], str]
) -> int:
    if (args.name is None) == (args.run_id is None):
        raise SubmitError("give a TrainJob's name, or --run RUN_ID (not both)")
    if args.run_id:
        described = client.describe_run(args.run_id, args.tracking_uri)
    else:
        described = client.describe(args.name, args.tracking_uri)
    if args.output:
        out.write(dump(described.to_dict(), args.output) + "\n")
    else:
        out.write(describe.render(described, datetime.datetime.now(datetime.UTC)) + "\n")
    return names.CLI_EXIT_OK


def run_events(
    client: Client, args: argparse.Namespace, out: IO[str], dump: Callable[[Any, str], str]
) -> int:
    events = client.events(args.name, args.tracking_uri)
    if args.output:
        out.write(dump([dataclasses.asdict(e) for e in events], args.output) + "\n")
    elif not events:
        out.write(f"No events for trainjob/{args.name} in namespace {client.namespace}.\n")
    else:
        out.write(describe.events_table(events, datetime.datetime.now(datetime.UTC)) + "\n")
    return names.CLI_EXIT_OK


def run_ui(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    """Print the run's page; when it is served here, serve it until Ctrl-C."""
    with client.ui(args.name, args.port, args.address, args.tracking_uri) as page:
        if page.server is None:
            out.write(f"{page.url}\n")
            return names.CLI_EXIT_OK
        out.write(
            f"Serving MLflow run {page.url.rsplit('/', 1)[-1]} of trainjob/{args.name} through the API "
            f"server's service proxy; Ctrl-C to stop\n{page.url}\n"
        )
        out.flush()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return names.CLI_EXIT_OK
