"""krew/mwms.yaml, krew's plugin manifest: krew's required fields (as its index validation checks them), the
release's version, and the sha256 of the archive krew/build.py builds, which must run `kubectl mwms`."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from static_support import REPO

MANIFEST = REPO / "krew" / "mwms.yaml"
VERSION = (REPO / "VERSION").read_text().strip()
ARCHIVE = f"kubectl-mwms-v{VERSION}.tar.gz"
SEMVER = r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?"


def build(out: Path) -> tuple[bytes, str]:
    """`python krew/build.py OUT`, as the release runs it: the archive's bytes and the sha256 it printed."""
    done = subprocess.run(
        [sys.executable, str(REPO / "krew" / "build.py"), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [p.name for p in out.iterdir()] == [ARCHIVE]
    return (out / ARCHIVE).read_bytes(), done.stdout.strip()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> bytes:
    return build(tmp_path_factory.mktemp("krew"))[0]


def members(data: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return set(tar.getnames())


@pytest.fixture(scope="module")
def plugin():
    return yaml.safe_load(MANIFEST.read_text())


def test_krews_required_fields(plugin, built):
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin"
    assert plugin["metadata"]["name"] == MANIFEST.stem == "mwms"  # the file is named as the plugin
    spec = plugin["spec"]
    assert re.fullmatch(SEMVER, spec["version"]) and spec["shortDescription"].strip()
    assert spec["homepage"].startswith("https://")
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["selector"] and platform["bin"] == "kubectl-mwms"
        assert platform["uri"].startswith("https://") and re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert {f["from"] for f in platform["files"]} == members(built) == {"kubectl-mwms", "LICENSE"}


def test_the_version_is_the_releases(plugin):
    assert plugin["spec"]["version"] == f"v{VERSION}"
    for platform in plugin["spec"]["platforms"]:
        assert platform["uri"].endswith(f"/v{VERSION}/{ARCHIVE}")
    assert f"pip install mwms=={VERSION}" in plugin["spec"]["caveats"]


def test_the_sha256_is_the_archives_and_its_shim_runs_the_client(plugin, built, tmp_path):
    data, sha = build(tmp_path / "again")
    assert data == built  # the same bytes every time
    assert {p["sha256"] for p in plugin["spec"]["platforms"]} == {hashlib.sha256(data).hexdigest()} == {sha}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp_path, filter="data")
    shim = tmp_path / "kubectl-mwms"
    assert os.access(shim, os.X_OK)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The python3 that has the client: a wrapper, not a link (a venv's python found through a link elsewhere
    # loses its venv, and with it the client's editable install).
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([shim, "--help"], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.startswith("usage: kubectl mwms")


def test_the_release_builds_attests_and_attaches_the_archive_the_manifest_names(built, tmp_path, tools_bin):
    """The release job's own step (hack/ci/release.sh files, run here into a scratch folder) builds the
    archive and refuses a sha256 other than the manifest's; the job then attests and attaches that file."""
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job.get("steps", [])]
    [build_step] = [step for step in steps if "hack/ci/release.sh files" in step.get("run", "")]
    script = build_step["run"]
    env = {
        **os.environ,
        "DIST": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{tools_bin}{os.pathsep}{os.environ['PATH']}",
    }
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, env=env, check=True)
    assert (tmp_path / ARCHIVE).read_bytes() == built
    attach = next(step["run"] for step in steps if "gh release create" in step.get("run", ""))
    assert '"dist/kubectl-mwms-v${VERSION}.tar.gz"' in attach
    attested = next(step["with"]["subject-path"] for step in steps if "subject-path" in step.get("with", {}))
    assert "dist/*.tar.gz" in attested.split()
