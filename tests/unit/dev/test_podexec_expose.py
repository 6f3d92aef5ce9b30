"""podexec.expose with real mounts: what stands in for the image stays reachable for a non-root container,
wherever the checkout lives (a mode-0700 `mktemp -d` clone, a home directory, one closed inside another).

Each case runs in a child process with a private mount namespace, so nothing reaches the host."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("cluster_platform")  # root and mount namespaces, as the agent needs

NOBODY = 65532  # the chart's runAsUser


def as_nobody_after_expose(paths: list[str], probe: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(
        f"""
        import os
        from mwms_dev import podexec
        podexec.unshare(podexec.CLONE_NEWNS)
        podexec.mount(None, "/", podexec.MS_REC | podexec.MS_PRIVATE)
        podexec.expose({paths!r})
        os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
        {probe}
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


@pytest.fixture
def base() -> Iterator[Path]:
    """An open directory under /tmp (pytest's own tmp_path sits in a closed one, /tmp/pytest-of-root)."""
    path = Path(tempfile.mkdtemp(prefix="mwms-expose-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def closed_dir(path: Path, *files: str) -> Path:
    path.mkdir(mode=0o700)
    for name in files:
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(name)
    return path


def test_a_closed_checkout_is_reachable_with_its_entries_and_links(base):
    checkout = closed_dir(base / "ci-abc", "README.md", "dev/mwms_dev/x.py")
    (checkout / "link").symlink_to("dev")
    probe = (
        f"print(open('{checkout}/README.md').read(), open('{checkout}/link/mwms_dev/x.py').read(),"
        f" sorted(os.listdir('{checkout}')))"
    )
    done = as_nobody_after_expose([str(checkout), str(checkout / "dev")], probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["README.md", "dev/mwms_dev/x.py", "['README.md',", "'dev',", "'link']"]
    assert os.stat(checkout).st_mode & 0o777 == 0o700  # the host's directory is untouched


def test_only_the_exposed_paths_of_a_closed_home_are_visible(base):
    home = closed_dir(base / "home", "venv/bin/python", "checkout/setup.py", "secret/key")
    probe = f"print(sorted(os.listdir('{home}')), open('{home}/venv/bin/python').read())"
    done = as_nobody_after_expose([str(home / "venv"), str(home / "checkout")], probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['checkout',", "'venv']", "venv/bin/python"]


def test_a_closed_directory_inside_a_closed_one(base):
    outer = closed_dir(base / "outer")
    inner = closed_dir(outer / "inner", "module.py")
    done = as_nobody_after_expose([str(inner)], f"print(open('{inner}/module.py').read())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module.py"


def test_without_expose_the_closed_checkout_is_refused(base):
    # The control for the cases above: the probe really runs as a user the directory refuses.
    checkout = closed_dir(base / "ci-abc", "README.md")
    done = as_nobody_after_expose([], f"open('{checkout}/README.md')")
    assert done.returncode != 0 and "PermissionError" in done.stderr
