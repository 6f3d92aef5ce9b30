"""The Makefile says what it offers: `make help` lists every target, one line each, from its `## ` comment."""

from __future__ import annotations

import re

from static_support import REPO, run


def phony_targets() -> set[str]:
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    (names,) = re.findall(r"^\.PHONY:(.*)$", text, re.M)
    return set(names.split())


def test_make_help_lists_every_target_with_a_line_of_its_own():
    lines = run(["make", "--no-print-directory", "-C", REPO, "help"]).stdout.splitlines()
    listed = [line.split(None, 1) for line in lines]
    assert all(len(parts) == 2 for parts in listed), lines  # a name and what it does
    names = [parts[0] for parts in listed]
    assert len(names) == len(set(names)) and set(names) == phony_targets()


def test_plain_make_says_what_there_is_and_does_nothing_else():
    done = run(["make", "--no-print-directory", "-n", "-C", REPO])
    assert done.stdout.splitlines()[0].startswith("awk "), done.stdout
