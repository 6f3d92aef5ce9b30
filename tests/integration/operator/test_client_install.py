"""The client installs alone: the `mwms-contract` and `mwms` wheels, built from this checkout, into a fresh
venv of each Python 3.11/3.12/3.13 this machine has, then `mwms` run from there against the local cluster.

pip resolves the client's dependencies (kubernetes, cloudpickle, pyyaml, pathspec) from the index as
`make venv` does; its cache makes that quick after the first run. The two wheels are given as files, so
nothing of ours comes from the index.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]


def interpreter(version: str) -> str | None:
    """A python<version> that runs: on PATH (a pyenv shim may be there without that version enabled), or one
    of pyenv's or uv's installed versions."""
    home = Path.home()
    candidates = [
        shutil.which(f"python{version}"),
        *map(str, sorted(home.glob(f".pyenv/versions/{version}.*/bin/python{version}"))),
        *map(str, sorted(home.glob(f".local/share/uv/python/cpython-{version}.*/bin/python{version}"))),
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import venv"], capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    return None


# 3.11 (the trainer image's) always; 3.12 and 3.13 where this machine has them.
PYTHONS = {v: interpreter(v) for v in ("3.11", "3.12", "3.13")}

# What a client-only install must not bring (import names): the trainer's, the operator's, the dev cluster's.
NOT_CLIENT = ("tensorflow", "keras", "mlflow", "kopf", "mwms_operator", "mwms_trainer", "mwms_dev")


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("wheels")
    for project in ("contract", "client"):
        # A copy (links to VERSION and LICENSE followed): building in place would leave build/ in the tree.
        source = shutil.copytree(
            REPO / project, out / "src" / project, ignore=shutil.ignore_patterns("build")
        )
        built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, source, cwd=out)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    found = sorted(out.glob("*.whl"))
    assert [w.name.split("-")[0] for w in found] == ["mwms", "mwms_contract"], found
    return found


@pytest.fixture(scope="module", params=[v for v, found in PYTHONS.items() if found or v == "3.11"])
def venv(
    request: pytest.FixtureRequest, wheels: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A fresh venv of that Python with only the two wheels and their dependencies; its bin directory."""
    python = PYTHONS[request.param]
    assert python, f"no Python {request.param} here: the client must install on the trainer image's Python"
    where = tmp_path_factory.mktemp(f"py{request.param}")
    created = run(python, "-m", "venv", where / "venv", cwd=where)
    assert created.returncode == 0, created.stderr
    bin_dir = where / "venv" / "bin"
    installed = run(bin_dir / "python", "-m", "pip", "install", "--quiet", *wheels, cwd=where)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return bin_dir


def test_the_client_alone_runs_its_verbs_against_the_cluster(
    venv: Path, crd: None, cluster: Any, kubectl: Any, namespace: str, tmp_path: Path
) -> None:
    env = {"PATH": f"{venv}:/usr/bin:/bin", "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(tmp_path)}
    helped = run(venv / "mwms", "submit", "--help", cwd=tmp_path, env=env)
    assert helped.returncode == 0 and "usage: mwms submit SCRIPT" in helped.stdout, helped.stderr
    imported = run(
        venv / "python", "-c", "from mwms import Client, MirroredStrategyRunner", cwd=tmp_path, env=env
    )
    assert imported.returncode == 0, imported.stderr
    probe = f"import importlib.util as u; print([m for m in {NOT_CLIENT!r} if u.find_spec(m)])"
    assert run(venv / "python", "-c", probe, cwd=tmp_path, env=env).stdout.strip() == "[]"

    # No dev package: no dev-cluster or demo. No trainer: `local` says what to install.
    top = run(venv / "mwms", "--help", cwd=tmp_path, env=env)
    assert "submit" in top.stdout and "dev-cluster" not in top.stdout and "demo" not in top.stdout
    local = run(venv / "mwms", "local", "job.yaml", cwd=tmp_path, env=env)
    assert local.returncode == 2 and "pip install 'mwms-operator[trainer]'" in local.stderr
    krew = run(venv / "kubectl-mwms", "--version", cwd=tmp_path, env=env)
    assert krew.returncode == 0 and krew.stdout.startswith("mwms "), krew.stderr

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    submitted = run(
        venv / "mwms", "submit", script, "-n", namespace, "--name", "alone", cwd=tmp_path, env=env
    )
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout == f"trainjob/alone created in namespace {namespace}\n"
    stored = kubectl.json("get", "trainjob", "alone", "-n", namespace)
    assert stored["spec"]["code"] == {"configMap": "alone-code", "entrypoint": "train.py"}
    got = run(venv / "mwms", "get", "alone", "-n", namespace, "-o", "json", cwd=tmp_path, env=env)
    assert json.loads(got.stdout)["metadata"]["uid"] == stored["metadata"]["uid"], got.stderr
    deleted = run(venv / "mwms", "delete", "alone", "-n", namespace, cwd=tmp_path, env=env)
    assert deleted.returncode == 0 and deleted.stdout == 'trainjob.mwms.dev "alone" deleted\n'
