"""The layering rules of DESIGN.md that concern the runtime and the comm layer.

import-linter checks the layers as a whole; these two rules are stricter: nothing imports the
runtime (backends start roles as commands, so the CLI stays light), and comm imports nothing of
the package but itself and the error hierarchy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import surreal_kube

PACKAGE = Path(surreal_kube.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "surreal_kube" or n.startswith("surreal_kube.")}


def test_nothing_outside_the_runtime_imports_it():
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            i for i in _imports(path) if i.startswith("surreal_kube.runtime")
        )
        for path in PACKAGE.rglob("*.py")
        if "runtime" not in path.relative_to(PACKAGE).parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_comm_imports_only_itself_and_the_errors():
    allowed = ("surreal_kube.comm", "surreal_kube.errors")
    offenders = {
        path.name: sorted(i for i in _imports(path) if not i.startswith(allowed))
        for path in (PACKAGE / "comm").glob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_pickle_in_comm_or_runtime():
    """Nothing crosses a socket as pickle: neither layer may even import it."""
    for folder in ("comm", "runtime"):
        for path in (PACKAGE / folder).glob("*.py"):
            tree = ast.parse(path.read_text())
            modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            modules |= {
                n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
            }
            assert not modules & {"pickle", "cPickle", "dill", "cloudpickle"}, path
            assert "recv_pyobj" not in path.read_text() and "send_pyobj" not in path.read_text(), (
                path
            )
