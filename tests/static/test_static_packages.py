"""Every package of ours (contract, client, operator, trainer, dev) is built of rooms: no module over 400
lines, and no import cycle among its modules.

An import anywhere in a module counts (function-level and TYPE_CHECKING imports too: a loop that only works
because one side imports late is still a loop). `from pkg import name` reads `name` from the package's
__init__, so it depends on the __init__ and whatever the __init__ imports; a module reaches a sibling by its
own name (`from pkg.mod import x`, `import pkg.mod`), and only the __init__ imports its modules' names to
re-export them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from static_support import REPO

PACKAGES = {
    "mwms_contract": REPO / "contract" / "mwms_contract",
    "mwms": REPO / "client" / "mwms",
    "mwms_operator": REPO / "operator" / "mwms_operator",
    "mwms_trainer": REPO / "trainer" / "mwms_trainer",
    "mwms_dev": REPO / "dev" / "mwms_dev",
}
MAX_LINES = 400


def modules(package: str, root: Path) -> dict[str, Path]:
    """{dotted module name: file} of every module in the package (an __init__.py is the package itself)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (at `path`) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from . import x`, `from ..y import z`
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # The package (or module) the names are read from, and each name that is a module of its own.
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return (found & known) - {name}


def import_graph(package: str, root: Path) -> dict[str, set[str]]:
    found = modules(package, root)
    return {name: imported(name, path, set(found)) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One loop, as `a -> b -> a`, for each group of modules that import each other round a loop (each
    strongly connected component of the graph, found with Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = {stack.pop()}
            while module not in component:
                component.add(stack.pop())
            components.append(component)

    for module in sorted(graph):
        if module not in index:
            connect(module)
    return sorted(loop_through(graph, component) for component in components if len(component) > 1)


def loop_through(graph: dict[str, set[str]], component: set[str]) -> str:
    """A shortest loop within the component from its alphabetically first module back to that module."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for target in sorted(graph[module] & component):
            if target == start:
                return " -> ".join([*paths[module], start])
            if target not in paths:
                paths[target] = [*paths[module], target]
                queue.append(target)
    raise AssertionError(f"{sorted(component)} is not a loop")  # a component of more than one always is


def test_the_cycle_finder_sees_a_loop_through_a_function_level_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from pkg import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from pkg.c import g\n")
    (tmp_path / "c.py").write_text("import pkg.a\n")
    (tmp_path / "d.py").write_text("from pkg import a\n")  # into the loop, not part of it
    assert cycles(import_graph("pkg", tmp_path)) == ["pkg.a -> pkg.b -> pkg.c -> pkg.a"]


def test_the_cycle_finder_sees_a_module_that_reads_a_sibling_through_the_package(tmp_path: Path) -> None:
    """The client's old loop: __init__ re-exports runner's names, runner imports sdk, and sdk took submit
    from the package (`from mwms import submit`), so it depended on the __init__ that imports runner."""
    (tmp_path / "__init__.py").write_text("from pkg.runner import Runner\n")
    (tmp_path / "runner.py").write_text("from .sdk import Client\n")
    (tmp_path / "sdk.py").write_text("from pkg import submit\n")
    (tmp_path / "submit.py").write_text("")
    assert cycles(import_graph("pkg", tmp_path)) == ["pkg -> pkg.runner -> pkg.sdk -> pkg"]
    (tmp_path / "sdk.py").write_text("import pkg.submit as packing\n")
    assert cycles(import_graph("pkg", tmp_path)) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_another_that_imports_it_back(package: str) -> None:
    graph = import_graph(package, PACKAGES[package])
    assert len(graph) > 1 and any(graph.values())  # the finder still reads the package
    assert cycles(graph) == []


MODULES = [path for root in PACKAGES.values() for path in sorted(root.rglob("*.py"))]


@pytest.mark.parametrize("module", MODULES, ids=lambda path: str(path.relative_to(REPO)))
def test_no_module_is_over_400_lines(module: Path) -> None:
    lines = len(module.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module.name} has {lines} lines: it holds more than one job, split it"
