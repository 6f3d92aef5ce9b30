"""Load a script that is not in a package (hack/ci/run-tests.py) as a module, for tests to call."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[3]


def load(name: str, relative_path: str) -> ModuleType:
    """The file at REPO/`relative_path` as module `name`, registered in sys.modules (dataclasses look their
    module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative_path)
    assert spec is not None and spec.loader is not None, relative_path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
