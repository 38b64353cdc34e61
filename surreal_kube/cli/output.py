"""All terminal output: results to stdout, diagnostics and progress to stderr.

One place decides how errors look, so every verb reports failures the same way.
"""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def abort(message: str, code: int = 1) -> NoReturn:
    """Print one error line to stderr and exit with `code` (1 failure, 2 usage/validation)."""
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(code)


def info(message: str) -> None:
    """A diagnostic line on stderr (never mixed into a command's result)."""
    err.print(message, markup=False)


def result(text: str) -> None:
    """A command's result on stdout, printed verbatim (no markup, no wrapping)."""
    typer.echo(text, nl=not text.endswith("\n"))
