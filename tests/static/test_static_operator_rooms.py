"""The operator's rooms say what they hold: handlers.py is only the kopf wiring, and the API client imports
none of the decision code. (No module over 400 lines, here as in every package of ours:
test_static_packages.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from static_support import REPO

OPERATOR = REPO / "operator" / "mwms_operator"
DECISION_CODE = {"pods", "facts", "policy", "status"}
API_CLIENT = ("k8s.py", "refusals.py", "metrics.py")


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_handlers_hold_only_the_kopf_wiring():
    assert lines(OPERATOR / "handlers.py") <= 120, "move what is not kopf wiring out (reconciler.py)"


@pytest.mark.parametrize("module", API_CLIENT)
def test_the_api_client_imports_no_decision_code(module):
    tree = ast.parse((OPERATOR / module).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            imported |= {n.removeprefix("mwms_operator.") for n in names if n.startswith("mwms_operator.")}
    assert imported & DECISION_CODE == set(), "phase and reason names come from mwms_contract.conditions"
