"""The CLI's layout: one module per verb, named after it, and no verb importing another.

What two verbs share lives in a helper module of `surreal_kube/cli/`; a verb that imported
another verb's module would make the one a library of the other, the shape this rules out.
"""

from __future__ import annotations

import ast
from pathlib import Path

from surreal_kube.cli import main

VERBS = Path(main.__file__).parent / "verbs"
PACKAGE = "surreal_kube.cli.verbs"


def _verb_names() -> list[str]:
    return sorted(p.stem for p in VERBS.glob("*.py") if p.stem != "__init__")


def _imported(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside functions, as dotted names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_every_registered_verb_lives_in_its_own_module() -> None:
    registered = {}
    for command in main.app.registered_commands:
        assert command.callback is not None
        name = command.name or command.callback.__name__.replace("_", "-")
        registered[name] = command.callback.__module__
    assert registered == {name: f"{PACKAGE}.{name}" for name in registered}
    assert sorted(registered) == _verb_names()  # and no verb module left unregistered


def test_no_verb_imports_another_verb() -> None:
    verbs = {f"{PACKAGE}.{name}" for name in _verb_names()}
    for name in _verb_names():
        others = verbs - {f"{PACKAGE}.{name}"}
        assert not _imported(VERBS / f"{name}.py") & others, f"verbs/{name}.py imports a verb"
