"""The `mwms` command (also `kubectl mwms`): a thin layer over `mwms.Client`.

Exit codes (mwms_contract.names.CLI_EXIT_*), as kubectl's: 0 done; 1 an error (not found, refused,
unreachable), a job that failed (`submit --follow`, `wait`) or a wait that timed out; 2 a bad command line,
or nothing was submitted; 3 the job is Suspended (`wait`, `submit --follow`, `logs -f`); 130 interrupted.
Subcommands of other installed packages (the `mwms.commands` entry points: `dev-cluster` and `demo` from
mwms-operator's dev package) are listed and run as their own.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import mwms.completion as completion
import mwms.convert_cli as convert_cli
import mwms.inspect_cli as inspect_cli
import mwms.kubectl as kubectl
import mwms.submit as packing
import mwms.submit_flags as submit_flags
from mwms.jobs import Job, JobSuspended, suspended_message
from mwms.kube import SubmitError
from mwms.output import dump, run_fields, show_jobs, show_watched, table
from mwms.sdk import Client
from mwms_contract import names
from mwms_contract.conditions import PHASES, SUSPENDED

EXIT_OK, EXIT_ERROR, EXIT_USAGE = names.CLI_EXIT_OK, names.CLI_EXIT_ERROR, names.CLI_EXIT_USAGE
EXIT_SUSPENDED, EXIT_INTERRUPTED = names.CLI_EXIT_SUSPENDED, names.CLI_EXIT_INTERRUPTED
PLUGINS = "mwms.commands"
TRAINER_MISSING = (
    "mwms local runs the trainer on this machine, which needs TensorFlow: "
    "pip install 'mwms-operator[trainer]'"
)


# -- output ------------------------------------------------------------------------------------------------


def report(job: Job, summary: Mapping[str, Any], out: IO[str]) -> int:
    """After `submit --follow`: the run, the model and the chief's result (from its termination message,
    `summary`); exit 0, or 1 with the failure."""
    if not job.succeeded:
        out.write(f"Failed: {job.message}\n")
        return EXIT_ERROR
    out.write(f"Succeeded. MLflow run ID: {job.mlflow.run_id}\nModel URI: {job.mlflow.model_uri}\n")
    if "resultArtifact" in summary:  # up to 1 MiB: not for a terminal (Client().result(name) reads it)
        out.write(
            f"Result: {summary.get('resultBytes')} bytes of JSON, in MLflow at {summary['resultArtifact']}\n"
        )
    elif summary.get("result") is not None:
        out.write(f"Result: {json.dumps(summary['result'])}\n")
    return EXIT_OK


# -- commands ----------------------------------------------------------------------------------------------


def client_of(args: argparse.Namespace) -> Client:
    return Client(namespace=args.namespace, kubeconfig=args.kubeconfig, context=args.context)


def cmd_submit(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    try:
        code = packing.pack(args.script, args.working_dir, args.requirements)
        asked = submit_flags.keywords(args)
        if args.dry_run and args.output:
            out.write(dump(submit_flags.dry_run_trainjob(args, code, asked), args.output) + "\n")
            return EXIT_OK
        if args.dry_run:
            packing.dry_run(code, out)
            return EXIT_OK
        if code.left_out:
            err.write(f"mwms submit: left out (ignored): {', '.join(code.left_out)}\n")
        client = client_of(args)
        job = client.submit(
            args.script,
            replicas=args.replicas,
            args=args.args,
            name=args.name,
            experiment=args.experiment,
            image=args.image,
            working_dir=args.working_dir,
            requirements=args.requirements,
            **asked,
        )
    except SubmitError as e:
        err.write(f"mwms submit: {e}\n")
        return EXIT_USAGE
    out.write(f"trainjob/{job.name} created in namespace {client.namespace}\n")
    out.flush()
    if not args.follow:
        return EXIT_OK
    try:
        done = client.follow(job.name, out)
    except KeyboardInterrupt:
        return interrupted(client, job.name, args.detach, out)
    return report(done, client.chief_summary(job.name), out)


def interrupted(client: Client, name: str, detach: bool, out: IO[str]) -> int:
    """Ctrl-C: ask whether to delete the job (never with --detach, nor without a terminal to ask on)."""
    delete = False
    if not detach and sys.stdin.isatty():
        with contextlib.suppress(EOFError, KeyboardInterrupt):
            delete = input(f"\ndelete trainjob/{name}? [y/N] ").strip().lower() in ("y", "yes")
    if delete:
        client.delete(name)
        out.write(f"trainjob/{name} deleted\n")
    else:
        out.write(f"\ntrainjob/{name} keeps running: mwms get {name} -n {client.namespace}\n")
    return EXIT_INTERRUPTED


def cmd_list(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    client = client_of(args)
    listed = client.list(args.all_namespaces, selector=args.selector)
    show_jobs(listed, args.output, out, all_namespaces=args.all_namespaces)
    if args.watch:
        watched = client.watch(all_namespaces=args.all_namespaces, selector=args.selector)
        show_watched(watched, args.output, out, args.all_namespaces)
    return EXIT_OK


def cmd_get(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    client = client_of(args)
    jobs = [client.get(name) for name in args.names]
    show_jobs(jobs, args.output, out, single=len(jobs) == 1, progress=True)
    if args.watch:
        show_watched(client.watch(names=args.names), args.output, out, False, progress=True)
    return EXIT_OK


def cmd_logs(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    return inspect_cli.run_logs(client_of(args), args, out, err)


def cmd_describe(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    return inspect_cli.run_describe(client_of(args), args, out, dump)


def cmd_events(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    return inspect_cli.run_events(client_of(args), args, out, dump)


def cmd_ui(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    return inspect_cli.run_ui(client_of(args), args, out)


def cmd_wait(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    wanted = args.phases
    job = client_of(args).wait(args.name, timeout=args.timeout, phases=wanted)
    if args.output:
        show_jobs([job], args.output, out, single=True)
    else:
        out.write(f"trainjob/{job.name} {job.phase}\n")
    if wanted is not None and job.phase in wanted:
        return EXIT_OK
    if job.phase == SUSPENDED:
        err.write(f"mwms wait: {suspended_message(job.name)}\n")
        return EXIT_SUSPENDED
    if wanted is not None:
        why = f": {job.message}" if job.message else ""
        err.write(f"mwms wait: trainjob/{job.name} is {job.phase}, not {' or '.join(wanted)}{why}\n")
        return EXIT_ERROR
    if not job.succeeded:
        err.write(f"mwms wait: trainjob/{job.name} failed: {job.message}\n")
        return EXIT_ERROR
    return EXIT_OK


def cmd_delete(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    client = client_of(args)
    for name in args.names:
        client.delete(name)
        out.write(f'trainjob.mwms.dev "{name}" deleted\n')
    return EXIT_OK


def cmd_runs(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    client = client_of(args)
    jobs = [client.get(name) for name in args.names] if args.names else client.list()
    fields = [run_fields(job) for job in jobs]
    if args.output in ("json", "yaml"):
        out.write(dump(fields[0] if len(args.names) == 1 else fields, args.output) + "\n")
        return EXIT_OK
    rows = [["NAME", "PHASE", "RUN ID", "EXPERIMENT", "MODEL URI", "TRACKING URI"]]
    rows += [
        [
            job.name,
            job.phase,
            *(v or "<none>" for v in (run.run_id, run.experiment_id, run.model_uri, run.tracking_uri)),
        ]
        for job, run in ((job, job.mlflow) for job in jobs)
    ]
    out.write(table(rows) + "\n")
    return EXIT_OK


def cmd_completion(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    out.write(completion.script(args.shell, args.top))
    return EXIT_OK


def cmd_convert(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    return convert_cli.run(args, out, err, sys.stdin)


def cmd_local(argv: Sequence[str]) -> int:
    """The trainer's local mode in its own process: the client never imports the trainer."""
    if importlib.util.find_spec("mwms_trainer") is None or importlib.util.find_spec("tensorflow") is None:
        print(f"mwms local: {TRAINER_MISSING}", file=sys.stderr)
        return EXIT_USAGE
    return subprocess.run([sys.executable, "-m", "mwms_trainer.local", *argv], check=False).returncode


# -- parsing -----------------------------------------------------------------------------------------------


def seconds(text: str) -> float:
    """kubectl's durations: 90, 90s, 15m, 2h."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (90, 90s, 15m, 2h)") from None


def phase_set(text: str) -> list[str]:
    """`--for Running,Succeeded`: phases, as status.phase spells them."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in PHASES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"{text!r}: not phases (one or more of {', '.join(PHASES)}, comma-separated)"
        )
    return chosen


def parser(plugins: Mapping[str, importlib.metadata.EntryPoint]) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=kubectl.prog(sys.argv[0]),
        description="TensorFlow multi-worker training on Kubernetes: submit and follow TrainJobs.",
        epilog="exit codes: 0 ok; 1 error, failed job or timeout; 2 bad usage or nothing submitted; "
        "3 the job is Suspended (`wait`, `submit --follow`, `logs -f`); 130 interrupted",
    )
    top.add_argument("--version", action="version", version=f"mwms {importlib.metadata.version('mwms')}")
    verbs = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    cluster = argparse.ArgumentParser(add_help=False)
    cluster.add_argument("--namespace", "-n", help="default: the kubeconfig context's")
    cluster.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    cluster.add_argument("--context", help="default: the kubeconfig's current context")

    def verb(name: str, run: Callable[..., int], text: str, output: Sequence[str] = ()) -> Any:
        sub = verbs.add_parser(name, parents=[cluster], help=text, description=text)
        sub.set_defaults(run=run)
        if output:
            sub.add_argument(
                "--output",
                "-o",
                type=kubectl.output_format(output),
                metavar="{" + ",".join(f"{o}=..." if o in kubectl.TEMPLATED else o for o in output) + "}",
                help="default: text for people",
            )
        return sub

    submit = verb("submit", cmd_submit, "run your training script as a TrainJob (packs it into a ConfigMap)")
    submit.usage = f"{top.prog} submit SCRIPT [options] [-- SCRIPT_ARGS...]"
    submit.add_argument("script", type=Path, help="the script to run on every worker (as __main__)")
    submit.add_argument("--replicas", type=int, default=1, help="number of workers (default 1)")
    submit.add_argument("--experiment", help="MLflow experiment (default: the job's name)")
    submit.add_argument("--image", help="trainer image (default: the operator's)")
    submit.add_argument(
        "--working-dir",
        type=Path,
        help="pack this directory (it must hold the script), less what its .gitignore and .mwmsignore files "
        "and the defaults (.git/, .env*, keys, .kube/, .aws/) leave out",
    )
    submit.add_argument(
        "--dry-run", action="store_true", help="list the files it would pack and their size; create nothing"
    )
    submit.add_argument("--requirements", type=Path, help="a pip requirements file installed on each worker")
    submit.add_argument("--name", help="the TrainJob's name (default: the script's name and a suffix)")
    submit.add_argument("--follow", "-f", action="store_true", help="show progress and the chief's log")
    submit.add_argument("--detach", action="store_true", help="with --follow: Ctrl-C never deletes the job")
    submit_flags.add(submit)

    listing = verb("list", cmd_list, "list TrainJobs", kubectl.LISTED)
    listing.add_argument("--all-namespaces", "-A", action="store_true", help="in every namespace")
    getting = verb("get", cmd_get, "show TrainJobs", kubectl.LISTED)
    getting.add_argument("names", nargs="+")
    kubectl.add_list_flags(listing, getting)
    inspect_cli.logs_arguments(verb("logs", cmd_logs, inspect_cli.LOGS_HELP), seconds)
    inspect_cli.describe_arguments(
        verb("describe", cmd_describe, inspect_cli.DESCRIBE_HELP, ("json", "yaml"))
    )
    events = verb("events", cmd_events, inspect_cli.EVENTS_HELP, ("json", "yaml"))
    events.add_argument("name")
    inspect_cli.tracking_argument(events)
    inspect_cli.ui_arguments(verb("ui", cmd_ui, inspect_cli.UI_HELP))
    wait = verb(
        "wait",
        cmd_wait,
        "wait until a TrainJob succeeds (exit 0), fails (exit 1) or is suspended (exit 3)",
        ("json", "yaml"),
    )
    wait.add_argument("name")
    wait.add_argument("--timeout", type=seconds, help="give up (exit 1) after this long: 90s, 15m, 2h")
    wait.add_argument(
        "--for",
        dest="phases",
        type=phase_set,
        metavar="PHASES",
        help=f"exit 0 once the phase is one of these (comma-separated: {', '.join(PHASES)}); it still "
        "returns on Succeeded, Failed (exit 1) or Suspended (exit 3)",
    )
    verb("delete", cmd_delete, "delete TrainJobs (their pods and code go with them)").add_argument(
        "names", nargs="+"
    )
    runs = verb("runs", cmd_runs, "the MLflow run and model of TrainJobs (default: all)", ("json", "yaml"))
    runs.add_argument("names", nargs="*")
    converting = verbs.add_parser("convert", help=convert_cli.HELP, description=convert_cli.DESCRIPTION)
    converting.set_defaults(run=cmd_convert)
    convert_cli.arguments(converting)
    completing = verbs.add_parser("completion", help="shell completion: source <(mwms completion bash)")
    completing.add_argument("shell", choices=completion.SHELLS)
    completing.set_defaults(run=cmd_completion, top=top)
    verbs.add_parser(
        "local", help="run a TrainJob manifest as local processes (needs the trainer)", add_help=False
    )
    for name, entry in sorted(plugins.items()):
        source = entry.dist.name if entry.dist else entry.module
        verbs.add_parser(name, help=f"{source}'s command: mwms {name} --help", add_help=False)
    return top


def installed_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=PLUGINS)}


def split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """Everything after `--` goes to the script (argparse alone would take it for unknown options)."""
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out, err = out or sys.stdout, err or sys.stderr
    plugins = installed_plugins()
    # local and the plugins parse their own arguments.
    if argv and argv[0] == "local":
        return cmd_local(argv[1:])
    if argv and argv[0] in plugins:
        return int(plugins[argv[0]].load()(argv[1:]) or 0)
    own, script_args = split_script_args(argv)
    own = kubectl.hoist(own)
    args = parser(plugins).parse_args(own)
    args.args = script_args
    if args.command == "submit" and args.replicas < 1:
        parser(plugins).error("--replicas must be at least 1")
    try:
        return int(args.run(args, out, err))
    except JobSuspended as e:
        err.write(f"mwms {args.command}: {e}\n")
        return EXIT_SUSPENDED
    except (SubmitError, TimeoutError, RuntimeError) as e:
        err.write(f"mwms {args.command}: {e}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
