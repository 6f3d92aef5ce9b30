"""One version: VERSION is the source; every copy that tools need in their own files equals it, and no other
shipped file spells it out."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from static_support import CHART, MANIFESTS, REPO, container_env, find, helm_template, load_all, run

VERSION = (REPO / "VERSION").read_text().strip()
# Files whose tools need the version written out (Helm, kustomize, Argo CD, Flux); each is checked below.
COPIES = {
    "charts/mwms-operator/Chart.yaml",
    "manifests/kustomization.yaml",
    "manifests/gitops/argocd-application.yaml",
    "manifests/gitops/flux-helmrelease.yaml",
    "CHANGELOG.md",
    "client/pyproject.toml",  # the client's pin of mwms-contract: one release, one contract
    "krew/mwms.yaml",  # the release's tag and archive (tests/static/test_static_krew.py checks them)
}
# Not shipped: test data with fixed images, lock files (other projects' versions), recorded results.
NOT_SHIPPED = ("tests/", "requirements/", "bench/results/")


def test_version_is_semver():
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", VERSION), VERSION


def test_python_distribution_reads_version_file():
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}


@pytest.mark.parametrize("project", ["contract", "client"])
def test_the_published_distributions_read_version_through_a_link(project):
    """mwms-contract and mwms are built from their own directories (release.yml): VERSION is a link there."""
    import tomllib

    assert (REPO / project / "VERSION").resolve() == REPO / "VERSION"
    pyproject = tomllib.loads((REPO / project / "pyproject.toml").read_text())
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}


def test_the_client_needs_the_contract_of_its_own_release():
    import tomllib

    pyproject = tomllib.loads((REPO / "client" / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("mwms-contract")]
    assert pins == [f"mwms-contract=={VERSION}"]


def test_installed_operator_has_this_version():
    """The operator's default trainer image comes from its package metadata (stale venv: `make venv`)."""
    from mwms_operator import __version__, settings

    assert __version__ == VERSION
    assert f"ghcr.io/mwms-dev/mwms-trainer:{VERSION}" == settings.DEFAULT_TRAINER_IMAGE


def test_chart_versions():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION


def test_chart_images_default_to_app_version(helm):
    """The operator image's tag is appVersion, and the operator picks the trainer image of that version."""
    deployment = find(load_all(helm_template(helm)), "Deployment", "mwms-operator")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"ghcr.io/mwms-dev/mwms-operator:{VERSION}"
    )
    assert "MWMS_TRAINER_IMAGE" not in container_env(deployment)
    pinned = find(
        load_all(helm_template(helm, "--set", "operator.trainerImage=registry.local/trainer:dev")),
        "Deployment",
        "mwms-operator",
    )
    assert container_env(pinned)["MWMS_TRAINER_IMAGE"] == "registry.local/trainer:dev"


def test_changelog_top_entry_is_this_version():
    """Keep a Changelog: the newest entry is the version being built, with its link at the bottom."""
    text = (REPO / "CHANGELOG.md").read_text()
    entries = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert entries and entries[0] == VERSION, f"CHANGELOG.md's top entry: {entries[:1]}, VERSION: {VERSION}"
    assert re.search(rf"^\[{re.escape(VERSION)}\]: https://", text, re.MULTILINE), "no link for the entry"


def test_kustomize_tags_the_operator_image(kubectl):
    (kustomization,) = load_all((MANIFESTS / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "ghcr.io/mwms-dev/mwms-operator", "newTag": VERSION}]
    docs = load_all(run([kubectl, "kustomize", MANIFESTS]).stdout)
    deployment = find(docs, "Deployment", "mwms-operator")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"ghcr.io/mwms-dev/mwms-operator:{VERSION}"
    )


def test_gitops_examples_follow_the_release_tag():
    (app,) = load_all((MANIFESTS / "gitops" / "argocd-application.yaml").read_text())
    assert app["spec"]["source"]["targetRevision"] == f"v{VERSION}"
    flux = load_all((MANIFESTS / "gitops" / "flux-helmrelease.yaml").read_text())
    source = next(d for d in flux if d["kind"] == "GitRepository")
    assert source["spec"]["ref"]["tag"] == f"v{VERSION}"


def test_no_other_shipped_file_spells_the_version():
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    pattern = re.compile(rf"(?<![\d.]){re.escape(VERSION)}(?!\.?\d)")
    spelled = {
        name
        for name in files
        if name
        and name != "VERSION"
        and not name.startswith(NOT_SHIPPED)
        and (REPO / name).is_file()
        and not (REPO / name).is_symlink()  # contract/VERSION, client/VERSION: links to VERSION itself
        and pattern.search((REPO / name).read_text(errors="ignore"))
    }
    extra = sorted(spelled - COPIES)
    assert spelled == COPIES, f"{VERSION} is hand-written outside VERSION and the checked copies: {extra}"
