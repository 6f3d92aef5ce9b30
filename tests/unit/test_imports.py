"""Who may import whom. The operator, the trainer and the client share only mwms_contract, which imports
nothing of ours and nothing outside the standard library; the operator image has no TensorFlow and the
trainer image no operator."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Each package of ours: the folder its source is in. The client (client/mwms) is checked once it exists.
SOURCES = {
    "mwms_contract": REPO / "contract" / "mwms_contract",
    "mwms_operator": REPO / "operator" / "mwms_operator",
    "mwms_trainer": REPO / "trainer" / "mwms_trainer",
    "mwms": REPO / "client" / "mwms",
    "mwms_dev": REPO / "dev" / "mwms_dev",
}
# Which of our packages each may not import (mwms_contract: none of ours but itself).
FORBIDDEN = {
    "mwms_contract": set(SOURCES) - {"mwms_contract"},
    "mwms_operator": {"mwms_trainer", "mwms", "mwms_dev"},
    "mwms_trainer": {"mwms_operator", "mwms", "mwms_dev"},
    "mwms": {"mwms_operator", "mwms_trainer", "mwms_dev"},  # `mwms local` runs the trainer as a process
}


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports anywhere in it (function-level imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def cross_imports(sources: dict[str, Path]) -> list[str]:
    """`module imports package` for every import FORBIDDEN allows none of."""
    wrong = []
    for package, forbidden in FORBIDDEN.items():
        root = sources[package]
        for path in sorted(root.rglob("*.py")) if root.is_dir() else []:
            name = f"{package}/{path.relative_to(root)}"
            wrong += [f"{name} imports {other}" for other in sorted(imported_packages(path) & forbidden)]
    return wrong


def test_no_package_of_ours_imports_across_the_contract():
    assert cross_imports(SOURCES) == []


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_contract_imports_only_the_standard_library():
    loaded = _run(
        "import pkgutil, sys\n"
        "before = set(sys.modules)\n"
        "import mwms_contract\n"
        "for m in pkgutil.iter_modules(mwms_contract.__path__):\n"
        "    __import__('mwms_contract.' + m.name)\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(sorted(new - set(sys.stdlib_module_names) - {'mwms_contract'}))\n"
    )
    assert loaded == "[]"


def test_the_trainer_imports_with_the_operator_and_kopf_blocked():
    """What the trainer image runs: every module of mwms_trainer, without the operator (not in the image)."""
    imported = _run(
        "import pkgutil, sys\n"
        "for name in ('mwms_operator', 'kopf'):\n"
        "    sys.modules[name] = None  # any import of these now raises ImportError\n"
        "import mwms_trainer\n"
        "names = [m.name for m in pkgutil.iter_modules(mwms_trainer.__path__)]\n"
        "for name in names:\n"
        "    __import__('mwms_trainer.' + name)\n"
        "print(len(names))\n"
    )
    assert int(imported) >= 15


def test_operator_imports_with_tensorflow_blocked():
    code = (
        "import sys\n"
        "for name in ('tensorflow', 'tf_keras', 'keras', 'mlflow'):\n"
        "    sys.modules[name] = None  # any import of these now raises ImportError\n"
        "import kopf\n"
        "import mwms_operator.handlers, mwms_operator.__main__, mwms_operator.kube.leader\n"
        "from mwms_operator.settings import OperatorConfig\n"
        "mwms_operator.handlers.register(kopf.OperatorRegistry(), OperatorConfig())\n"
        "assert 'tensorflow' not in [m for m, v in sys.modules.items() if v is not None]\n"
        "print('ok')\n"
    )
    assert _run(code) == "ok"


def test_the_running_operator_loads_no_kubernetes_client():
    """The operator talks to the API server with its own small client on kopf's credentials: the `kubernetes`
    client (and pydantic, its models) would cost ~30 MiB, and kopf loads it whenever it can import it."""
    code = (
        "import sys\n"
        "from mwms_operator.__main__ import keep_out_unused_clients\n"
        "keep_out_unused_clients()  # as `python -m mwms_operator` does first\n"
        "import kopf, mwms_operator.handlers, mwms_operator.kube.leader\n"
        "from mwms_operator.settings import OperatorConfig\n"
        "mwms_operator.handlers.register(kopf.OperatorRegistry(), OperatorConfig())\n"
        "loaded = {m.split('.')[0] for m, v in sys.modules.items() if v is not None}\n"
        "print(sorted(loaded & {'kubernetes', 'pydantic', 'urllib3', 'google'}))\n"
    )
    assert _run(code) == "[]"


def test_a_bad_setting_stops_the_operator_with_the_variable_named():
    result = subprocess.run(
        [sys.executable, "-m", "mwms_operator"],
        env={"MWMS_METRICS_PORT": "many", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "MWMS_METRICS_PORT" in result.stderr


def test_kopf_watches_all_namespaces_or_only_the_configured_ones():
    from mwms_operator.__main__ import run_options
    from mwms_operator.settings import OperatorConfig

    everywhere = run_options(OperatorConfig.from_env({"MWMS_HEALTH_PORT": "9000"}))
    assert everywhere.pop("identity").startswith("mwms-operator@")
    assert everywhere == {
        "standalone": True,
        "clusterwide": True,
        "namespaces": [],
        "liveness_endpoint": "http://0.0.0.0:9000/healthz",
    }
    some = run_options(OperatorConfig.from_env({"MWMS_WATCH_NAMESPACES": "team-a,ml-*"}))
    assert (some["clusterwide"], some["namespaces"]) == (False, ["team-a", "ml-*"])
