"""`mwms convert`: Kubeflow TFJob YAML in, TrainJob YAML out (mwms.tfjob converts; mwms.cli wires it).

Every document is read first; a TFJob (or a List of them) is converted, any other document is written as it
is. What does not carry over is named on stderr, one line each with its field, and then nothing is written
and the exit is 1, unless --allow-loss."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import IO, Any

import yaml

from mwms.conversion import Conversion, ConvertError
from mwms.tfjob import KIND, convert_tfjob
from mwms_contract import names

HELP = "convert Kubeflow TFJob YAML (kubeflow.org/v1) to TrainJobs, naming what does not carry over"
DESCRIPTION = (
    f"{HELP}. Other documents are written as they are. Each field that does not carry over is named on "
    "stderr; then nothing is written and the exit is 1, unless --allow-loss (docs/migration.md)."
)
LISTS = ("List", f"{KIND}List")


def arguments(convert: argparse.ArgumentParser) -> None:
    convert.add_argument("file", help="TFJob YAML, one or more documents (- reads stdin)")
    convert.add_argument("--output", "-o", type=Path, metavar="FILE", help="write here (default: stdout)")
    convert.add_argument(
        "--allow-loss",
        action="store_true",
        help="write the TrainJobs even when something does not carry over (still named on stderr)",
    )


def _converted(doc: Any, where: str, found: list[tuple[str, Conversion]]) -> Any:
    """The document with its TFJobs converted (each conversion added to `found`), others as they are."""
    if not isinstance(doc, dict):
        raise ConvertError(where, f"not an object but {type(doc).__name__}")
    if doc.get("kind") in LISTS and isinstance(doc.get("items"), list):
        items = [_converted(item, f"{where}.items[{i}]", found) for i, item in enumerate(doc["items"])]
        return {**doc, "apiVersion": "v1", "kind": "List", "items": items}
    if doc.get("kind") != KIND:
        return doc
    name = (doc.get("metadata") or {}).get("name")
    try:
        conversion = convert_tfjob(doc)
    except ConvertError as error:
        raise ConvertError(f"tfjob/{name}" if name else where, str(error)) from None
    found.append((f"tfjob/{name}", conversion))
    return conversion.trainjob


def run(args: argparse.Namespace, out: IO[str], err: IO[str], stdin: IO[str]) -> int:
    source = "stdin" if args.file == "-" else args.file
    try:
        text = stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        found: list[tuple[str, Conversion]] = []
        written = [_converted(doc, f"{source}: document {i + 1}", found) for i, doc in enumerate(docs)]
    except OSError as error:
        err.write(f"mwms convert: {source}: {error.strerror or error}\n")
        return names.CLI_EXIT_ERROR
    except (yaml.YAMLError, ConvertError) as error:
        err.write(f"mwms convert: {error}\n")
        return names.CLI_EXIT_ERROR
    if not found:
        err.write(f"mwms convert: {source}: no {KIND} ({KIND} kubeflow.org/v1) in it\n")
        return names.CLI_EXIT_ERROR
    for job, conversion in found:
        for remark in conversion.notes:
            err.write(f"{job}: note: {remark}\n")
    lost = [f"{job}: lost: {remark}\n" for job, conversion in found for remark in conversion.losses]
    err.writelines(lost)
    if lost and not args.allow_loss:
        what = "1 field does" if len(lost) == 1 else f"{len(lost)} fields do"
        err.write(
            f"mwms convert: {what} not carry over to a TrainJob (above); nothing written "
            "(--allow-loss writes the TrainJobs without them)\n"
        )
        return names.CLI_EXIT_ERROR
    text = yaml.safe_dump_all(written, sort_keys=False)
    if args.output is None:
        out.write(text)
        return names.CLI_EXIT_OK
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as error:
        err.write(f"mwms convert: {args.output}: {error.strerror or error}\n")
        return names.CLI_EXIT_ERROR
    return names.CLI_EXIT_OK
