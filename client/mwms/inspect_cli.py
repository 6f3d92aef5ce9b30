"""The `mwms logs`, `describe` and `events` verbs: their arguments and output (mwms.cli wires them)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from collections.abc import Callable
from typing import IO, Any

import mwms.describe as describe
from mwms.follow import POD_RUNNING_TIMEOUT
from mwms.sdk import Client
from mwms_contract import names

LOGS_HELP = (
    "print a worker's log (default: the chief's), from its pod while it lives, from the job's MLflow run "
    "after (every worker uploads its log when it exits)"
)
DESCRIBE_HELP = "show a TrainJob: its conditions, each worker's state and last reason, recent events, the run"
EVENTS_HELP = "list the Events of a TrainJob and of its pods, oldest first"


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
    )
    for line in lines:
        out.write(line + "\n")
        out.flush()
    return names.CLI_EXIT_OK


def run_describe(
    client: Client, args: argparse.Namespace, out: IO[str], dump: Callable[[Any, str], str]
) -> int:
    described = client.describe(args.name)
    if args.output:
        out.write(dump(described.to_dict(), args.output) + "\n")
    else:
        out.write(describe.render(described, datetime.datetime.now(datetime.UTC)) + "\n")
    return names.CLI_EXIT_OK


def run_events(
    client: Client, args: argparse.Namespace, out: IO[str], dump: Callable[[Any, str], str]
) -> int:
    events = client.events(args.name)
    if args.output:
        out.write(dump([dataclasses.asdict(e) for e in events], args.output) + "\n")
    elif not events:
        out.write(f"No events for trainjob/{args.name} in namespace {client.namespace}.\n")
    else:
        out.write(describe.events_table(events, datetime.datetime.now(datetime.UTC)) + "\n")
    return names.CLI_EXIT_OK
