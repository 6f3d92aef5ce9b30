"""dev/'s structure: no two modules of mwms_dev import each other (directly or round a longer loop), and
nothing but cluster.py reaches into a LocalCluster's private members: a node gets what it needs of the
cluster through mwms_dev.node_context."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "dev" / "mwms_dev"
# Where a LocalCluster is used: the package itself, the tests and the benches.
USERS = (REPO / "dev", REPO / "tests", REPO / "bench")


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The mwms_dev modules `path` imports anywhere in it (function-level and TYPE_CHECKING imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = f"mwms_dev.{node.module or ''}".rstrip(".") if node.level else node.module or ""
            # `from mwms_dev import pki` imports the module pki, and so does `from mwms_dev.pki import x`.
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name.removeprefix("mwms_dev.") for name in names if name.startswith("mwms_dev.")} & modules
    return found - {path.stem}


def import_graph(package: Path) -> dict[str, set[str]]:
    modules = {path.stem for path in package.glob("*.py")}
    return {path.stem: imported_modules(path, modules) for path in sorted(package.glob("*.py"))}


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each import loop once, as `a -> b -> a` (starting from its alphabetically first module)."""
    found = set()

    def walk(path: list[str]) -> None:
        for target in sorted(graph[path[-1]]):
            if target == path[0]:
                found.add(" -> ".join([*path, target]))
            elif target not in path and target > path[0]:
                walk([*path, target])

    for module in sorted(graph):
        walk([module])
    return sorted(found)


def test_the_cycle_finder_sees_a_loop_through_a_function_level_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from mwms_dev import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from mwms_dev.c import g\n")
    (tmp_path / "c.py").write_text("import mwms_dev.a\n")
    assert cycles(import_graph(tmp_path)) == ["a -> b -> c -> a"]


def test_no_module_of_mwms_dev_imports_another_that_imports_it_back() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def on_self(node: ast.AST) -> bool:
    """`self.<name>`: an object's own member."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def local_cluster_private_names() -> set[str]:
    """LocalCluster's `_` methods and attributes, as cluster.py defines them."""
    tree = ast.parse((PACKAGE / "cluster.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LocalCluster")
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    names |= {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and on_self(n)}
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def private_reaches(roots: tuple[Path, ...], private: set[str]) -> list[str]:
    """`file:line .name` wherever code outside cluster.py reads one of `private` on another object."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path == PACKAGE / "cluster.py" or ".venv" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in private and not on_self(node):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} .{node.attr}")
    return found


def test_nothing_outside_cluster_py_reaches_into_a_local_clusters_private_members() -> None:
    private = local_cluster_private_names()
    assert {"_supervisor", "_take_lock"} <= private  # the finder still reads the class
    assert private_reaches(USERS, private) == []
