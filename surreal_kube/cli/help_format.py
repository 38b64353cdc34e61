"""How `--help` looks: plain click help with readable metavars, no words broken at hyphens.

typer 0.29 draws help either as rich panels (slow to import, boxes that break in pipes) or as
plain click help. We use the plain one and fix the two things it gets wrong for us:

- it shows an argument's Python type next to its name (`NAME <str>`) and a required argument
  in braces in the usage line (`{name}`); people expect `NAME`, as in every Unix manual;
- an option without a metavar shows its Python type (`<str>`, `<list[Path]>`); we show click's
  words instead (TEXT, INTEGER, NUMBER, PATH);
- click's wrapper breaks words at hyphens, so `~/.surreal-kube` or `--max-env-steps` could be
  split across two lines.

`install()` patches these once, at start-up; it touches nothing else.
"""

from __future__ import annotations

from typing import Any

_installed = False
_WORDS = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "path": "PATH", "bool": "BOOLEAN"}


def install() -> None:
    """Apply the help fixes of the module docstring (idempotent)."""
    global _installed
    if _installed:
        return
    from typer import core
    from typer._click import _textwrap

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None  # the metavar (NAME, PROCESS) already says what goes there

    def usage_display_name(self: Any) -> str:
        name = str(self.display_name_raw)
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 and not name.endswith("...") else "")

    option_type = core.TyperOption.display_type_rich

    def option_display_type(self: Any, ctx: Any) -> str | None:
        if self.metavar is not None:
            return str(self.metavar)
        shown = option_type(self, ctx)
        if shown is None:
            return None
        bare = shown.strip("<>.").removeprefix("list[").rstrip("]>")
        return _WORDS.get(bare.lower(), bare.upper())

    core.TyperOption.display_type_rich = option_display_type  # type: ignore[method-assign]
    core.TyperArgument.display_type_rich = display_type_rich  # type: ignore[method-assign]
    core.TyperArgument._usage_display_name = usage_display_name  # type: ignore[method-assign]

    base_init = _textwrap.TextWrapper.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("break_on_hyphens", False)
        base_init(self, *args, **kwargs)

    _textwrap.TextWrapper.__init__ = init  # type: ignore[method-assign]
    _installed = True
