"""Run one scenario of the benchmarks and append its record to the results.

`python -m mwms_bench SCENARIO [options]` prints the figures and appends the run's record to
bench/results/<scenario>.jsonl (a run that fails or is interrupted is recorded with its error and what it
had measured by then). `python -m mwms_bench report` renders docs/benchmarks.md from them."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from mwms_bench import results
from mwms_bench.scenarios import Scenario, chaos, infra, operator_costs, scale, trainer

ALL: list[Scenario] = [s for m in (operator_costs, scale, chaos, infra, trainer) for s in m.SCENARIOS]
INTERNAL = ("scenario", "label", "subnet_index")


def add_option(parser: argparse.ArgumentParser, name: str, default: Any, help: str | None) -> None:
    """--name, its type that of its default (see Scenario.options)."""
    flag, kind = "--" + name.replace("_", "-"), default if default is Path else type(default)
    if isinstance(default, list):  # one or more values: strings, or of the type of its first value
        kind = type(default[0]) if default else str
    if name == "command":
        parser.add_argument(name, nargs=argparse.REMAINDER, help="-- COMMAND")
    elif isinstance(default, bool):
        parser.add_argument(flag, action="store_true", help=help)
    elif isinstance(default, list):
        parser.add_argument(flag, nargs="+", type=kind, default=default, help=help)
    else:  # Path: a path, none by default
        parser.add_argument(flag, type=kind, default=None if default is Path else default, help=help)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m mwms_bench", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    for scenario in ALL:
        one = sub.add_parser(scenario.name, help=scenario.help, description=scenario.help)
        for name, default in scenario.options.items():
            add_option(one, name, *(default if isinstance(default, tuple) else (default, None)))
        one.add_argument("--label", default="", help="names a comparison (a plain run has none)")
        index = int(os.environ.get("MWMS_BENCH_SUBNET_INDEX", "21"))
        one.add_argument("--subnet-index", type=int, default=index, help="a local cluster's pod bridge")
    sub.add_parser("report", help="render docs/benchmarks.md from bench/results/")
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.scenario == "report":
        return results.main()
    scenario = next(s for s in ALL if s.name == args.scenario)
    params = {k: str(v) if hasattr(v, "parts") else v for k, v in vars(args).items() if k not in INTERNAL}
    command = shlex.join(["python", "-m", "mwms_bench", *argv])
    record = {"scenario": scenario.name, "label": args.label, "command": command, "params": params}
    record |= {"figures": {}, "provenance": results.provenance()}
    try:
        scenario.run(args, record["figures"])
    except BaseException as error:
        record["error"] = f"{type(error).__name__}: {error}"[:2000]
        raise
    finally:
        record["provenance"]["loadavg_end"] = results.loadavg()
        print(json.dumps(record["figures"], indent=1, default=str))
        print(f"appended to {results.append(record)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
