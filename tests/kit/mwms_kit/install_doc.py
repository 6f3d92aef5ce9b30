"""docs/install.md's commands, read from the doc, so the tests that check or run them cannot drift from it."""

from __future__ import annotations

import re
from pathlib import Path

INSTALL_MD = Path(__file__).resolve().parents[3] / "docs" / "install.md"
KEEP_TRAINJOBS = "## Uninstalling and keeping your TrainJobs"
UPGRADING = "## Upgrading\n"


def kustomize_uninstall_script() -> str:
    """The ```sh block of "Uninstalling and keeping your TrainJobs" that deletes the kustomize install, its
    continued lines joined: a shell script as users paste it."""
    section = INSTALL_MD.read_text().split(KEEP_TRAINJOBS, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    (block,) = [b for b in blocks if "kubectl" in b and "delete" in b]
    return block.replace("\\\n", " ")


def upgrade_commands() -> list[str]:
    """The command lines of the first ```sh block of "Upgrading", in order, as users run them."""
    section = INSTALL_MD.read_text().split(UPGRADING, 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)[0]
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
