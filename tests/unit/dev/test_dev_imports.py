"""dev/'s structure: nothing but cluster.py reaches into a LocalCluster's private members: a node gets what
it needs of the cluster through mwms_dev.node_context. (No import cycles, here as in every package of ours:
tests/static/test_static_packages.py.)"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "dev" / "mwms_dev"
# Where a LocalCluster is used: the package itself, the tests and the benches.
USERS = (REPO / "dev", REPO / "tests", REPO / "bench")


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
