"""The benches run our operator in the image's Python environment (hack/build/operator-venv.sh, from
requirements/operator.lock.txt), so the memory they measure is the image's: .venv also holds the kubernetes
client, which kopf imports whenever it is installed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from mwms_kit.oci_registry import build_output

REPO = Path(__file__).resolve().parents[3]
LOADED = (
    "import json, sys, mwms_operator.handlers; "
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
)


def normal(pin: str) -> str:
    """`PyYAML==6.0.4` as the lock spells it: `pyyaml==6.0.4`."""
    return pin.lower().replace("_", "-")


def top_level_modules(python: str) -> set[str]:
    env = {"PYTHONPATH": f"{REPO / 'operator'}:{REPO / 'contract'}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([python, "-c", LOADED], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_the_operator_loads_what_the_image_holds_and_no_kubernetes_client():
    python = build_output("operator-venv.sh")
    loaded = top_level_modules(python)
    assert {"kopf", "aiohttp", "mwms_operator", "mwms_contract"} <= loaded
    assert not loaded & {"kubernetes", "pykube", "requests", "google", "oauthlib"}, loaded
    freeze = [python, "-m", "pip", "freeze"]
    installed = subprocess.run(freeze, capture_output=True, text=True, check=True).stdout.split()
    lock = (REPO / "requirements" / "operator.lock.txt").read_text()
    pinned = {normal(line.split(" ")[0]) for line in lock.splitlines() if "==" in line}
    assert {normal(pin) for pin in installed} <= pinned
