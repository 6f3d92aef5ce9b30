"""mwms_operator.__version__ without importlib.metadata: installed, from the .dist-info beside the package."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import mwms_operator


def load_from(site: Path) -> str:
    spec = importlib.util.spec_from_file_location("copied_operator", site / "mwms_operator" / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.__version__)


def test_an_installed_package_takes_its_version_from_its_dist_info(tmp_path):
    site = tmp_path / "lib" / "python3" / "site-packages"  # no VERSION file above it
    (site / "mwms_operator").mkdir(parents=True)
    shutil.copy(Path(mwms_operator.__file__), site / "mwms_operator" / "__init__.py")
    (site / "mwms_operator-7.8.9.dist-info").mkdir()
    assert load_from(site) == "7.8.9"


def test_the_operator_does_not_import_importlib_metadata():
    """Its import costs ~1 MiB; kopf, aiohttp and prometheus_client do not need it either."""
    code = (
        "import sys; sys.modules.update({n: None for n in ('kubernetes', 'kubernetes_asyncio', 'pykube')}); "
        "import mwms_operator.__main__, mwms_operator.handlers, kopf; "
        "print('importlib.metadata' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"
