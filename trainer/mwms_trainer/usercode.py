"""spec.code: the user's entrypoint (`module:function`, or a script run as `__main__`) from MWMS_CODE_DIR,
run through strategy_runner.run_here: the peers met, the chief's one MLflow run, exit 75 on a lost peer."""

from __future__ import annotations

import base64
import importlib
import importlib.util
import json
import logging
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from mwms_contract import names
from mwms_trainer import strategy_runner
from mwms_trainer.errors import ConfigError
from mwms_trainer.tfenv import tensorflow

log = logging.getLogger("mwms_trainer")


def _is_function_entrypoint(entrypoint: str) -> bool:
    return ":" in entrypoint and not entrypoint.endswith(".py")


def load_entrypoint(
    code_dir: Path, entrypoint: str, args: list[str], source: str = "configMap"
) -> Callable[[], Any]:
    """A callable that runs the entrypoint. ConfigError (exit 2, names the field) when it is not there;
    anything the user's code raises on import propagates as it is. source: spec.code's configMap or volume.

    The module is imported by the callable, not here: its top-level code may create the strategy and the
    model, which needs the peers there, the startup backstop and peer loss made retryable
    (strategy_runner.run_here).
    """
    files = sorted(p.name for p in code_dir.iterdir()) if code_dir.is_dir() else []
    if not [f for f in files if not f.startswith("..")]:  # a ConfigMap volume's own ..data links
        why = (
            "the volume holds no files"
            if source == "volume"
            else "the ConfigMap does not exist (or has no keys)"
        )
        raise ConfigError(f"spec.code.{source}", f"the code directory {code_dir} is empty: {why}")
    if str(code_dir) not in sys.path:
        sys.path.insert(0, str(code_dir))
    if _is_function_entrypoint(entrypoint):
        module_name, function_name = entrypoint.split(":", 1)
        if importlib.util.find_spec(module_name) is None:
            raise ConfigError(
                "spec.code.entrypoint", f"no module {module_name!r} in the code directory (files: {files})"
            )

        def run_function() -> Any:
            function = getattr(importlib.import_module(module_name), function_name, None)
            if not callable(function):
                raise ConfigError(
                    "spec.code.entrypoint", f"module {module_name!r} has no function {function_name!r}"
                )
            return function()

        return run_function
    script = code_dir / entrypoint
    if not script.is_file():
        raise ConfigError(
            "spec.code.entrypoint", f"no script {entrypoint!r} in the code directory (files: {files})"
        )

    def run_script() -> Any:
        sys.argv = [str(script), *args]
        runpy.run_path(str(script), run_name="__main__")
        return strategy_runner._state.get("result")  # what a nested MirroredStrategyRunner.run returned

    return run_script


def install_requirements(code_dir: Path, requirements: str, environ: Mapping[str, str]) -> None:
    """pip install -r into a private directory put first on sys.path; pip's cache on the checkpoint
    volume when there is one, so a restarted group does not download everything again."""
    path = code_dir / requirements
    if not path.is_file():
        raise ConfigError("spec.code.requirements", f"no file {requirements!r} in the code directory")
    if importlib.util.find_spec("pip") is None:
        raise ConfigError(
            "spec.code.requirements",
            "this image has no pip: build an image FROM the trainer image "
            "with your packages instead (docs/submit.md)",
        )
    target = Path(tempfile.gettempdir()) / "mwms-packages"
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    argv += ["--target", str(target), "-r", str(path)]
    checkpoint = environ.get(names.ENV_CHECKPOINT_DIR, "").strip()
    argv += ["--cache-dir", f"{checkpoint}/.pip-cache"] if checkpoint else ["--no-cache-dir"]
    log.info("installing %s", requirements)
    done = subprocess.run(argv, cwd=code_dir, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise ConfigError("spec.code.requirements", f"pip install -r {requirements} failed: {lines[-1]}")
    sys.path.insert(0, str(target))


def last_traceback_line(error: BaseException, code_dir: Path) -> str:
    """`ZeroDivisionError: division by zero (train.py, line 7)`: the error and where in the user's files."""
    text = traceback.format_exception_only(type(error), error)[-1].strip()
    where = None
    if isinstance(error, SyntaxError) and error.filename:
        where = (error.filename, error.lineno)
    else:
        for frame in traceback.extract_tb(error.__traceback__):
            if frame.filename.startswith(str(code_dir)):
                where = (frame.filename, frame.lineno)
    if where is None:
        return text
    name = os.path.relpath(where[0], code_dir) if where[0].startswith(str(code_dir)) else where[0]
    return f"{text} ({name}, line {where[1]})"


def run(environ: Mapping[str, str]) -> dict[str, Any]:
    """Run spec.code on this worker; the termination summary (the chief's carries the run and the result)."""
    code_dir = Path(environ.get(names.ENV_CODE_DIR) or names.CODE_MOUNT_PATH)
    entrypoint = environ.get(names.ENV_CODE_ENTRYPOINT, "").strip()
    try:
        args = json.loads(environ.get(names.ENV_CODE_ARGS) or "[]")
    except ValueError:
        raise ConfigError("spec.code.args", "must be a JSON list of strings") from None
    requirements = environ.get(names.ENV_CODE_REQUIREMENTS, "").strip()
    if requirements:
        install_requirements(code_dir, requirements, environ)
    tensorflow()  # TF_USE_LEGACY_KERAS before the user's module imports TensorFlow
    source = environ.get(names.ENV_CODE_SOURCE) or "configMap"
    function = load_entrypoint(code_dir, entrypoint, [str(a) for a in args], source)
    summary: dict[str, Any] = {}
    strategy_runner.run_here(function, {}, use_custom_strategy=True, summary=summary)
    return summary


def run_pickled() -> Any:
    """The entrypoint of `MirroredStrategyRunner(cluster=...).run(train)`: the function it pickled, run by
    the same runner (so `use_custom_strategy=False` gets its strategy scope there too)."""
    code_dir = Path(os.environ.get(names.ENV_CODE_DIR) or names.CODE_MOUNT_PATH)
    payload = base64.b64decode((code_dir / "function.pkl.b64").read_text())
    function, kwargs, custom = cloudpickle.loads(payload)
    return strategy_runner.MirroredStrategyRunner(use_custom_strategy=custom).run(function, **kwargs)
