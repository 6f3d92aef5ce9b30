"""hack/build/tools.sh: the pinned versions, and a second run that changes nothing."""

from __future__ import annotations

import json
import subprocess

from static_support import REPO, run


def test_pinned_versions(helm, kubectl):
    assert run([helm, "version", "--template", "{{.Version}}"]).stdout.strip() == "v4.1.4"
    client = json.loads(run([kubectl, "version", "--client", "-o", "json"]).stdout)["clientVersion"]
    assert client["gitVersion"] == "v1.35.2"


def test_second_run_is_a_no_op(tools_bin):
    """Installed already (by the fixture): nothing is downloaded or relinked, the same dir is printed."""
    links_before = {p.name: p.readlink() for p in tools_bin.iterdir()}
    result = subprocess.run(
        ["bash", "-x", str(REPO / "hack" / "build" / "tools.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tools_bin)
    traced = result.stderr
    assert "pip download" not in traced and "ln -sfn" not in traced, traced
    assert {p.name: p.readlink() for p in tools_bin.iterdir()} == links_before
