"""The operator's modules keep their parts apart: apply, status and the loops, wired by
handlers and main (issue 26). A module that reached up (status importing the apply, the apply
importing the loops) would make them one again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import surreal_kube.operator

PACKAGE = Path(surreal_kube.operator.__file__).parent
BELOW = {
    "config": set(),
    "status": {"config"},
    "apply": {"config", "status"},
    "loops": {"config", "status", "apply"},
    "handlers": {"status", "apply", "podwatch"},
}
"""Each module -> the operator modules it may import (the leaves below are free to all)."""
FREE = {"nodecache", "podcache", "rbac", "events", "metrics"}
"""Leaves: the caches, the RBAC rules, the Events it posts and the metrics it keeps. They import
no operator module themselves (checked below), so any part may use them."""


def operator_imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "surreal_kube.operator":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("surreal_kube.operator."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {
                a.name.split(".")[2]
                for a in node.names
                if a.name.startswith("surreal_kube.operator.")
            }
    return found - FREE


@pytest.mark.parametrize("module", sorted(BELOW))
def test_each_part_imports_only_the_parts_below_it(module: str) -> None:
    assert operator_imports(module) <= BELOW[module]


@pytest.mark.parametrize("module", sorted(FREE))
def test_the_leaves_import_no_operator_module(module: str) -> None:
    assert operator_imports(module) == set()


def test_no_operator_module_grows_past_600_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert max(sizes.values()) < 600, sizes
