"""Python files that are in no package (bench/ and its folders), loaded by path as modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(name: str, path: Path) -> ModuleType:
    """The file at `path` as module `name`, the one already in sys.modules if there is one: a file that
    several others load runs once, so its classes are the same for all of them. It is registered before it
    runs (dataclasses look their module up there) and taken out again if it fails."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
