"""GitHub CI's caches fit GitHub: one cache per component of $MWMS_CACHE, each keyed by every script that
builds it (and every script that one sources), and none of the big stores that would break the 10 GB limit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from static_support import REPO

HACK = REPO / "hack" / "build"  # every script that fills a cache
CI = REPO / ".github" / "workflows" / "ci.yml"
# Rebuilt on every run on purpose: buildah's store (~6.6 GB), the node's containerd root (~4.4 GB) and Go's
# module and build caches; the binaries and wheels they produce are what is cached.
NEVER_CACHED = ("images", "node/containerd-root", "go")
# Built by the test job (make test) and worth a cache of their own.
COMPONENTS = {
    "kubernetes",
    "control-plane",
    "node",
    "kueue",
    "kwok",
    "versitygw",
    "promtool",
    "tools",
    "mlflow-s3",
    "registry",
    "crane",
    "cosign",
    "release-tools",
    "pip",
    "previous",
}


def cache_steps() -> list[dict]:
    jobs = yaml.safe_load(CI.read_text())["jobs"]
    steps = jobs["test"]["steps"]
    return [step for step in steps if str(step.get("uses", "")).startswith("actions/cache@")]


def paths_of(step: dict) -> list[str]:
    return [line.strip() for line in str(step["with"]["path"]).splitlines() if line.strip()]


def hashed_files(step: dict) -> set[str]:
    key = str(step["with"]["key"])
    return {
        name for call in re.findall(r"hashFiles\(([^)]*)\)", key) for name in re.findall(r"'([^']+)'", call)
    }


def sourced(script: Path) -> set[Path]:
    """The hack/ scripts `script` sources, transitively."""
    found: set[Path] = set()
    for name in re.findall(r"^\s*source\s+[^\n#]*?([\w-]+\.sh)", script.read_text(), re.M):
        path = HACK / name
        if path not in found:
            found |= {path} | sourced(path)
    return found


def writers(component: str) -> set[Path]:
    """The hack/ scripts that name $CACHE_ROOT/<component>, with what they source."""
    pattern = re.compile(rf"\$CACHE_ROOT/{re.escape(component)}\b")
    direct = {script for script in HACK.rglob("*.sh") if pattern.search(script.read_text())}
    return direct | {dep for script in direct for dep in sourced(script)}


def component_of(path: str) -> str:
    match = re.fullmatch(r"~/\.cache/mwms/([\w-]+)(/.*)?", path)
    assert match, f"{path}: the test job caches only components of ~/.cache/mwms"
    return match.group(1)


def test_every_component_has_its_own_cache_and_the_whole_folder_none():
    cached = {component_of(paths_of(step)[0]) for step in cache_steps()}
    assert cached == COMPONENTS
    for step in cache_steps():
        assert "~/.cache/mwms" not in paths_of(step), "the whole folder holds ~11 GB of stores GitHub refuses"


def test_no_cache_holds_a_store_that_is_rebuilt_on_purpose():
    for step in cache_steps():
        for path in paths_of(step):
            if path.startswith("!"):
                continue
            rel = path.removeprefix("~/.cache/mwms/")
            assert not any(rel == big or rel.startswith(big + "/") for big in NEVER_CACHED), path
    (node,) = [s for s in cache_steps() if component_of(paths_of(s)[0]) == "node"]
    assert "!~/.cache/mwms/node/containerd-root-*" in paths_of(node), "the node's containerd root is ~4.4 GB"


@pytest.mark.parametrize("component", sorted(COMPONENTS - {"pip"}))
def test_each_key_names_every_script_that_builds_the_component(component):
    (step,) = [s for s in cache_steps() if component_of(paths_of(s)[0]) == component]
    scripts = {str(path.relative_to(REPO)) for path in writers(component)}
    assert scripts, f"no hack/ script writes $CACHE_ROOT/{component}"
    assert scripts - hashed_files(step) == set(), f"a change to these would not rebuild {component}"


def test_pip_cache_follows_what_pip_installs():
    (step,) = [s for s in cache_steps() if component_of(paths_of(s)[0]) == "pip"]
    assert {"pyproject.toml", "requirements/*.lock.txt"} <= hashed_files(step)


def test_the_build_scripts_keep_every_cache_under_mwms_cache():
    """What the keys above rely on: one variable moves every cache (hack/build/cache.sh)."""
    cache_sh = (HACK / "cache.sh").read_text()
    for variable in ("GOMODCACHE", "GOCACHE", "PIP_CACHE_DIR"):
        assert re.search(rf'{variable}="\$CACHE_ROOT/', cache_sh), variable
    for script in HACK.rglob("*.sh"):
        text = script.read_text()
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert ".cache/mwms" not in code or script.name == "cache.sh", f"{script.name}: use $CACHE_ROOT"
        if "CACHE_ROOT" in text and script.name != "cache.sh":
            assert HACK / "cache.sh" in sourced(script), f"{script.name} uses CACHE_ROOT without cache.sh"
