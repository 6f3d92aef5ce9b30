"""kubectl's habits in `mwms`: global flags before the verb, `-o jsonpath=` and `-o custom-columns=`, and the
name it was called by (`kubectl-mwms`, `kubectl mwms`)."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

# Flags every cluster verb takes, as kubectl's, which may come before the verb: `mwms -n team-a list`.
GLOBAL_WITH_VALUE = ("-n", "--namespace", "--kubeconfig", "--context", "-o", "--output", "-l", "--selector")
GLOBAL_SWITCHES = ("-A", "--all-namespaces")
TEMPLATED = ("jsonpath", "custom-columns")
NONE = "<none>"
LISTED = ("json", "yaml", "wide", "name", "jsonpath", "custom-columns")  # `-o` of list and get


def hoist(argv: Sequence[str]) -> list[str]:
    """Global flags given before the verb moved after it (argparse wants them after): `-n a list` ->
    `list -n a`. Anything else before the verb is left for argparse to refuse."""
    moved: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag = arg.split("=", 1)[0]
        if flag in GLOBAL_SWITCHES or (flag in GLOBAL_WITH_VALUE and "=" in arg):
            moved.append(arg)
        elif arg in GLOBAL_WITH_VALUE and i + 1 < len(argv):
            moved += [arg, argv[i + 1]]
            i += 1
        elif any(arg.startswith(f) and len(arg) > 2 for f in ("-n", "-o", "-l")):  # -nteam-a
            moved.append(arg)
        else:
            break
        i += 1
    if not moved or i >= len(argv) or argv[i].startswith("-"):
        return list(argv)
    return [argv[i], *moved, *argv[i + 1 :]]


def prog(argv0: str) -> str:
    """`kubectl mwms` when run as krew's plugin (kubectl-mwms), else `mwms`."""
    return "kubectl mwms" if os.path.basename(argv0).startswith("kubectl-") else "mwms"


def output_format(allowed: Sequence[str]) -> Any:
    """An argparse type for `-o`: one of `allowed`, or jsonpath=TEMPLATE / custom-columns=SPEC."""

    def output(text: str) -> str:
        kind = text.split("=", 1)[0]
        plain = text in allowed and text not in TEMPLATED
        if plain or (kind in allowed and kind in TEMPLATED and "=" in text):
            try:  # a bad template is a usage error, before anything is asked of the cluster
                if kind == "jsonpath":
                    parse(text.split("=", 1)[1])
                if kind == "custom-columns":
                    columns(text.split("=", 1)[1])
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
            return text
        shown = [f"{k}=..." if k in TEMPLATED else k for k in allowed]
        raise argparse.ArgumentTypeError(f"{text!r}: not an output format (one of {', '.join(shown)})")

    return output


def add_list_flags(listing: argparse.ArgumentParser, getting: argparse.ArgumentParser) -> None:
    """`list -l`, `list -w`, `get -w`."""
    listing.add_argument("--selector", "-l", help="only jobs with these labels: team=a,tier!=dev")
    for sub in (listing, getting):
        sub.add_argument(
            "--watch", "-w", action="store_true", help="then a line for each change (Ctrl-C ends it)"
        )


# -- jsonpath: kubectl's template language (fields, [n], [*], [?(@.a==b)], range/end, "literals") ---------

Node = tuple[str, Any]  # ("text", str) | ("path", str) | ("range", (str, list[Node]))


def parse(template: str) -> list[Node]:
    """The template as nodes; ValueError for an unbalanced one."""
    tokens = re.split(r"(\{[^{}]*\})", template)
    stack: list[list[Node]] = [[]]
    ranges: list[str] = []
    for token in tokens:
        if not token:
            continue
        if not (token.startswith("{") and token.endswith("}")):
            stack[-1].append(("text", token))
            continue
        inner = token[1:-1].strip()
        if inner.startswith("range "):
            ranges.append(inner[6:].strip())
            stack.append([])
        elif inner == "end":
            if not ranges:
                raise ValueError(f"jsonpath {template!r}: {{end}} without {{range}}")
            body = stack.pop()
            stack[-1].append(("range", (ranges.pop(), body)))
        elif inner.startswith('"') and inner.endswith('"') and len(inner) >= 2:
            stack[-1].append(("text", json.loads(inner)))
        else:
            stack[-1].append(("path", inner))
    if ranges:
        raise ValueError(f"jsonpath {template!r}: {{range}} without {{end}}")
    return stack[0]


def _steps(path: str) -> Iterator[str]:
    path = path.strip()
    if path.startswith(("$", "@")):
        path = path[1:]
    for match in re.finditer(r"\[\?\(([^)]*)\)\]|\[([^\]]*)\]|\.([^.\[]+)", path):
        filtered, index, field = match.groups()
        yield f"?{filtered}" if filtered is not None else f"[{index}]" if index is not None else field


def select(data: Any, path: str) -> list[Any]:
    """The values `path` (.a.b, [0], [*], .*, ['k'], [?(@.type=="Ready")]) finds in data."""
    found = [data]
    for step in _steps(path):
        following: list[Any] = []
        for value in found:
            if step.startswith("?"):
                following += [item for item in _items(value) if _matches(item, step[1:])]
            elif step in ("[*]", "*"):
                following += _items(value)
            elif step.startswith("["):
                key = step[1:-1].strip("'\"")
                if isinstance(value, list) and key.lstrip("-").isdigit():
                    if -len(value) <= int(key) < len(value):
                        following.append(value[int(key)])
                elif isinstance(value, dict) and key in value:
                    following.append(value[key])
            elif isinstance(value, dict) and step in value:
                following.append(value[step])
        found = following
    return found


def _items(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, list) else []


def _matches(item: Any, test: str) -> bool:
    match = re.fullmatch(r"\s*(@[^=!<>\s]*)\s*(==|!=)\s*(.+?)\s*", test)
    if match is None:
        return bool(select(item, test.strip()))
    left, op, right = match.groups()
    wanted = right.strip("'\"") if right[0] in "'\"" else json.loads(right) if right[0].isdigit() else right
    values = select(item, left)
    return any(v == wanted for v in values) if op == "==" else all(v != wanted for v in values)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def render(template: str | list[Node], data: Any) -> str:
    """kubectl's `-o jsonpath=TEMPLATE` of data: several values of one path are joined by a space."""
    nodes = parse(template) if isinstance(template, str) else template
    out: list[str] = []
    for kind, node in nodes:
        if kind == "text":
            out.append(node)
        elif kind == "path":
            out.append(" ".join(_text(v) for v in select(data, node)))
        else:
            path, body = node
            out += [render(body, item) for item in select(data, path)]
    return "".join(out)


def columns(spec: str) -> list[tuple[str, str]]:
    """`NAME:.metadata.name,PHASE:.status.phase` as (header, path); ValueError otherwise."""
    pairs = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header or not path:
            raise ValueError(f"custom-columns {part!r} is not HEADER:JSONPATH")
        pairs.append((header, path.strip().removeprefix("{").removesuffix("}")))
    return pairs


def custom_columns(spec: str, items: Sequence[Any]) -> list[list[str]]:
    """The rows of `-o custom-columns=SPEC`, the headers first (<none> where a path finds nothing)."""
    pairs = columns(spec)
    rows = [[header for header, _ in pairs]]
    for item in items:
        rows.append([",".join(_text(v) for v in select(item, path)) or NONE for _, path in pairs])
    return rows
