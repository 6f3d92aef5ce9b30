"""The operator image has no TensorFlow: importing the operator must not need it."""

import subprocess
import sys


def test_operator_imports_with_tensorflow_blocked():
    code = (
        "import sys\n"
        "for name in ('tensorflow', 'tf_keras', 'keras', 'mlflow'):\n"
        "    sys.modules[name] = None  # any import of these now raises ImportError\n"
        "import kopf\n"
        "import mwms_operator.handlers, mwms_operator.__main__, mwms_operator.leader\n"
        "from mwms_operator.config import OperatorConfig\n"
        "mwms_operator.handlers.register(kopf.OperatorRegistry(), OperatorConfig())\n"
        "assert 'tensorflow' not in [m for m, v in sys.modules.items() if v is not None]\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_running_operator_loads_no_kubernetes_client():
    """The operator talks to the API server with its own small client on kopf's credentials: the `kubernetes`
    client (and pydantic, its models) would cost ~30 MiB, and kopf loads it whenever it can import it."""
    code = (
        "import sys\n"
        "from mwms_operator.__main__ import keep_out_unused_clients\n"
        "keep_out_unused_clients()  # as `python -m mwms_operator` does first\n"
        "import kopf, mwms_operator.handlers, mwms_operator.leader\n"
        "from mwms_operator.config import OperatorConfig\n"
        "mwms_operator.handlers.register(kopf.OperatorRegistry(), OperatorConfig())\n"
        "loaded = {m.split('.')[0] for m, v in sys.modules.items() if v is not None}\n"
        "print(sorted(loaded & {'kubernetes', 'pydantic', 'urllib3', 'google'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


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
    from mwms_operator.config import OperatorConfig

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
