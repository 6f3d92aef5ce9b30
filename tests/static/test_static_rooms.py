"""The operator's rooms, along observe -> decide -> render -> act: each room exists and imports only the rooms
its place allows, so the pure ones (observe, decide, render) never reach the API server, MLflow or the
settings; a module whose docstring starts with "Pure" does no I/O; handlers.py is only kopf's wiring; and no
module name means two things across our packages. (No module over 400 lines, no import cycle:
test_static_packages.py.)"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
from static_support import REPO

pytestmark = pytest.mark.static

OPERATOR = REPO / "operator" / "mwms_operator"
PRODUCT = {
    "mwms_operator": OPERATOR,
    "mwms_trainer": REPO / "trainer" / "mwms_trainer",
    "mwms": REPO / "client" / "mwms",
    "mwms_contract": REPO / "contract" / "mwms_contract",
    "mwms_dev": REPO / "dev" / "mwms_dev",
}
# Each room of the operator and the rooms it may import besides itself (the package's __init__, for its
# version, and mwms_contract are open to all). A room never imports the top: settings, reconciler, handlers,
# __main__; those wire the rooms together.
ROOMS = {
    "observe": set(),  # what the watches told us; what a pod's state means
    "decide": {"observe"},  # the rules, the restarts, the status
    "render": {"observe"},  # the spec with its defaults, pods, the Service, labels
    "telemetry": set(),  # metrics, log lines, memory
    "kube": {"observe", "telemetry"},  # the API server: client, refusals, events, lookups, leader, queue
    "mlflow": {"observe", "render", "kube", "telemetry"},  # tracking servers: access, REST, progress, runs
}
PURE_ROOMS = ("observe", "decide", "render")
TOP = {"__init__", "__main__", "handlers", "reconciler", "settings"}
# Modules that do I/O, wait, or run threads: none of them in a pure room, nor in a module that says "Pure".
IO_MODULES = {
    "asyncio",
    "concurrent",
    "ctypes",
    "http",
    "kopf",
    "kubernetes",
    "logging",
    "mlflow",
    "multiprocessing",
    "prometheus_client",
    "requests",
    "select",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "subprocess",
    "tempfile",
    "tensorflow",
    "threading",
    "urllib.error",
    "urllib.request",  # urllib.parse only splits strings: allowed
}
# A "Pure" module also reads no clock and draws no random number: it is given `now` and its draws.
NOT_PURE_MODULES = IO_MODULES | {"io", "random", "time"}
NOT_PURE_CALLS = {"open", "print", "input"}  # builtins
NOT_PURE_METHODS = {"now", "utcnow", "today", "read_text", "write_text", "read_bytes", "write_bytes"}
NOT_PURE_OS = {"environ", "getenv", "putenv", "system", "popen", "kill", "remove", "unlink", "makedirs"}


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def imported(path: Path) -> set[str]:
    """Every module a module imports, anywhere in it (`from a.b import c` counts as a.b and a.b.c)."""
    found = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def within(name: str, modules: set[str]) -> bool:
    """`name` is one of `modules` or inside one of them (`http.client` is inside `http`)."""
    parts = name.split(".")
    return any(".".join(parts[:i]) in modules for i in range(1, len(parts) + 1))


def operator_modules() -> dict[str, Path]:
    """{dotted name below mwms_operator: file}, e.g. `kube.client`; a package's __init__ is the package."""
    found = {}
    for path in sorted(OPERATOR.rglob("*.py")):
        parts = path.relative_to(OPERATOR).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = path
    return found


def room_of(name: str) -> str | None:
    """The room a module (by its name below mwms_operator) is in; None for the top."""
    return name.split(".")[0] if name.split(".")[0] in ROOMS else None


def ours(path: Path) -> set[str]:
    """The operator modules (names below mwms_operator) a module imports, the package itself left out."""
    known = set(operator_modules())
    names = {n.removeprefix("mwms_operator.") for n in imported(path) if n.startswith("mwms_operator.")}
    return names & known


def says_pure(path: Path) -> bool:
    doc = ast.get_docstring(tree(path)) or ""
    return doc.strip().startswith("Pure")


def not_pure(path: Path) -> list[str]:
    """What a module does that a pure one may not: its I/O, clock or random imports, and calls."""
    wrong = sorted(n for n in imported(path) if within(n, NOT_PURE_MODULES))
    for node in ast.walk(tree(path)):
        called = node.func if isinstance(node, ast.Call) else None
        if isinstance(called, ast.Name) and called.id in NOT_PURE_CALLS:
            wrong.append(f"{called.id}()")
        if isinstance(called, ast.Attribute) and called.attr in NOT_PURE_METHODS:
            wrong.append(f".{called.attr}()")
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "os" and node.attr in NOT_PURE_OS:
            wrong.append(f"os.{node.attr}")
    return wrong


def test_the_operator_is_built_of_its_rooms():
    """Every module is in a room (a package with its own __init__) or one of the few at the top."""
    rooms = {p.name for p in OPERATOR.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ROOMS)
    top = {p.stem for p in OPERATOR.glob("*.py")}
    assert top == TOP, "a new module belongs in the room that answers its question"


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_imports_only_what_its_place_allows(room):
    allowed = ROOMS[room] | {room}
    wrong = []
    for name, path in operator_modules().items():
        if room_of(name) != room:
            continue
        for target in sorted(ours(path)):
            if room_of(target) not in allowed:
                wrong.append(f"{name} imports {target}")
    assert wrong == []


@pytest.mark.parametrize("room", PURE_ROOMS)
def test_the_pure_rooms_do_no_io(room):
    """observe, decide and render: no API server, no MLflow, no threads, no logging (settings and the act
    rooms are kept out by the room table)."""
    wrong = {
        name: sorted(n for n in imported(path) if within(n, IO_MODULES))
        for name, path in operator_modules().items()
        if room_of(name) == room
    }
    assert {name: found for name, found in wrong.items() if found} == {}


def _product_modules() -> list[tuple[str, Path]]:
    return [
        (f"{package}/{path.relative_to(root)}", path)
        for package, root in PRODUCT.items()
        for path in sorted(root.rglob("*.py"))
    ]


PURE = {name: path for name, path in _product_modules() if says_pure(path)}


@pytest.mark.parametrize("name", sorted(PURE))
def test_a_module_that_says_pure_is(name):
    assert not_pure(PURE[name]) == [], f"{name} says Pure: do the I/O elsewhere, or drop the word"


def test_a_pure_operator_module_imports_only_pure_operator_modules():
    """The promise holds all the way down: a pure module's own imports are pure too."""
    modules = operator_modules()
    wrong = [
        f"{name} imports {target}"
        for name, path in modules.items()
        if says_pure(path)
        for target in sorted(ours(path))
        if not says_pure(modules[target]) and modules[target].name != "__init__.py"
    ]
    assert wrong == []


def test_handlers_hold_only_the_kopf_wiring():
    """handlers.py: register() and kopf's own classes; every function in register() is a kopf handler that
    hands its event on (the work is the reconciler's)."""
    module = tree(OPERATOR / "handlers.py")
    wrong = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name != "register":
            wrong.append(f"function {node.name}")
        elif isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            if not all(b.startswith("kopf.") for b in bases):
                wrong.append(f"class {node.name}({', '.join(bases)})")
    register = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "register")
    for node in ast.walk(register):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node is not register:
            kopf = [d for d in node.decorator_list if ast.unparse(d).startswith("kopf.")]
            if not kopf:
                wrong.append(f"{node.name} is no kopf handler")
            if len(node.body) > 12:
                wrong.append(f"{node.name} does more than wire ({len(node.body)} statements)")
    assert wrong == []


@pytest.mark.parametrize("module", ["kube/client.py", "kube/refusals.py", "kube/events.py"])
def test_the_api_client_imports_no_decision_code(module):
    """What the API server's answers mean comes from mwms_contract.conditions, never from the rules."""
    targets = ours(OPERATOR / module)
    assert {t for t in targets if room_of(t) not in ("kube", "telemetry")} == set()


def basenames(packages: dict[str, Path]) -> dict[str, set[str]]:
    """{module basename: the packages that have a module of that name}, __init__ and __main__ left out."""
    found: dict[str, set[str]] = defaultdict(set)
    for package, root in packages.items():
        for path in root.rglob("*.py"):
            if path.stem not in ("__init__", "__main__"):
                found[path.stem].add(package)
    return found


def test_no_module_name_repeats_within_the_operator():
    stems = [p.stem for p in OPERATOR.rglob("*.py") if p.stem not in ("__init__", "__main__")]
    assert sorted({s for s in stems if stems.count(s) > 1}) == []


def test_the_operators_module_names_mean_one_thing_across_our_packages():
    """`tracking.py` must not be an allowlist in one package and an MLflow client in another."""
    repeats = {name: sorted(where) for name, where in basenames(PRODUCT).items() if len(where) > 1}
    assert {name: where for name, where in repeats.items() if "mwms_operator" in where} == {}


def test_no_module_name_repeats_across_our_packages():
    repeats = {name: sorted(where) for name, where in basenames(PRODUCT).items() if len(where) > 1}
    assert repeats == {}
