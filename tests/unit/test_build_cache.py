"""hack/build/cache.sh's build_needed: every cached build script asks it whether to build, so callers side
by side (make -j, parallel test sessions) build once, and a second run with the build present is a no-op."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A build that takes a while and counts itself, as the build scripts use the helper.
BUILD = """
set -euo pipefail
source "$1/hack/build/cache.sh"
out=$2
build_needed "$out/build.lock" test -e "$out/built" || { echo cached; exit 0; }
echo x >>"$out/builds"
sleep 0.5
touch "$out/built"
echo built
"""


def run_build(out: Path) -> subprocess.Popen[str]:
    argv = ["bash", "-c", BUILD, "build", str(REPO), str(out)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def test_callers_side_by_side_build_once(tmp_path):
    out = tmp_path / "cache" / "thing"
    builds = [run_build(out) for _ in range(3)]
    said = sorted(build.communicate()[0].strip() for build in builds)
    assert all(build.returncode == 0 for build in builds)
    assert said == ["built", "cached", "cached"]
    assert (out / "builds").read_text() == "x\n"


def test_a_cached_build_takes_no_lock(tmp_path):
    out = tmp_path / "thing"
    out.mkdir()
    (out / "built").touch()
    build = run_build(out)
    assert build.communicate()[0].strip() == "cached" and build.returncode == 0
    assert not (out / "build.lock").exists()
