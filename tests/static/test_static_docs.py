"""README and docs/: the README stays a front page, its links and the docs' links lead somewhere, and the
commands they show name our TrainJob so that Kubeflow Trainer v2's (the same kind) cannot be meant instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from static_support import CHART, REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def prose(text: str) -> str:
    """The text without code blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    names = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        names.add(base if count == 0 else f"{base}-{count}")
    return names


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    return broken


def test_slugs_follow_github():
    assert slug("Data larger than memory (`sharding: files`)") == "data-larger-than-memory-sharding-files"
    assert (
        slug("Deleting jobs, and what the operator watches") == "deleting-jobs-and-what-the-operator-watches"
    )


def test_the_readme_fits_on_a_few_screens():
    lines = README.read_text().count("\n")
    assert lines <= 150, f"README.md has {lines} lines: move the detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_to_files_and_headings_that_exist(page: Path):
    assert broken_links(page) == []


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other\n\n## A heading, here\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-heading-here) [gone](missing.md) [no heading](other.md#nowhere) [self](#top)\n"
        "`[not a link](missing.md)`\n\n```sh\n[nor this](missing.md)\n```\n# Top\n"
    )
    assert broken_links(page) == ["missing.md: no such file", "other.md#nowhere: no such heading"]


def test_every_doc_is_reachable_from_the_readme():
    targets = LINK.findall(prose(README.read_text()))
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in targets}
    assert [d.name for d in DOCS if d.resolve() not in linked] == []


# `kubectl get trainjobs`, `trainjob/NAME`, `explain trainjob.spec`: with Kubeflow Trainer v2 installed too,
# these may resolve to trainjobs.trainer.kubeflow.org. `trainjobs.mwms.dev` and the short name `tj` cannot.
BARE_RESOURCE = re.compile(r"trainjobs?(/\S*)?|trainjobs?\.(spec|status|metadata)\b\S*")
# "a bare `kubectl get trainjobs`" is how the docs name the clash itself.
KUBECTL = re.compile(r"(?<!bare[ \n]`)kubectl [^`\n|]*")


def bare_trainjob_commands(text: str) -> list[str]:
    found = []
    for command in KUBECTL.findall(text):
        tokens = [t.strip("'\"") for t in command.split()]
        if any(BARE_RESOURCE.fullmatch(t) for t in tokens):
            found.append(command.strip())
    return found


def test_the_bare_resource_is_found():
    assert bare_trainjob_commands("run `kubectl get trainjobs -A` or kubectl describe trainjob x") == [
        "kubectl get trainjobs -A",
        "kubectl describe trainjob x",
    ]
    assert bare_trainjob_commands("`kubectl explain trainjob.spec`, `kubectl create -f trainjob.yaml`") == [
        "kubectl explain trainjob.spec"
    ]
    ours = "kubectl get trainjobs.mwms.dev; kubectl wait trainjob.mwms.dev/x; kubectl explain tj.spec"
    assert bare_trainjob_commands(f"{ours}; a bare `kubectl get trainjobs` lists one group") == []


NOTES = CHART / "templates" / "NOTES.txt"
SAMPLES = sorted((REPO / "manifests" / "samples").glob("*.yaml"))


@pytest.mark.parametrize("page", [*PAGES, NOTES, *SAMPLES], ids=lambda p: str(p.relative_to(REPO)))
def test_commands_name_our_trainjob_not_one_kubeflow_may_also_define(page: Path):
    assert bare_trainjob_commands(page.read_text()) == []


@pytest.mark.parametrize("page", [*PAGES, NOTES, *SAMPLES], ids=lambda p: str(p.relative_to(REPO)))
def test_no_wait_for_success_alone(page: Path):
    """`kubectl wait --for=condition=Succeeded` sits out its whole timeout when the job fails."""
    text = re.sub(r"^\| `kubectl wait --for=condition=Succeeded`.*$", "", page.read_text(), flags=re.M)
    assert "--for=condition=Succeeded" not in text
