"""All terminal output: results to stdout, diagnostics and progress to stderr.

One place decides how errors, tables and machine-readable output look, so every verb reports
the same way:

- `-o/--output` takes the same formats on every verb that shows something (`FORMATS`); an unknown
  one is refused with the valid list, before anything else runs.
- Tables are rich tables on a terminal and plain, unwrapped, space-aligned columns otherwise
  (like kubectl), so `| grep` and `| awk` see whole words.
- Consoles that do not write to a terminal never wrap: a line in a pipe or a log file is whole;
  on a terminal rich wraps at word boundaries, never inside a word.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from surreal_kube.errors import SpecError

if TYPE_CHECKING:
    from rich.console import Console

# Wide enough that nothing a verb prints is ever wrapped when the console is not a terminal.
_PIPE_WIDTH = 4096


class _LazyConsole:
    """A rich Console made on first use: importing rich costs a tenth of `--help`'s budget."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The real Console (for rich.live.Live, which wants one)."""
        if self._console is None:
            from rich.console import Console

            # On a terminal rich wraps at word boundaries and knows how many rows a live view
            # takes (a terminal-wrapped line would break its redraw); in a pipe nothing wraps.
            tty = Console(stderr=self._stderr).is_terminal
            self._console = Console(
                stderr=self._stderr,
                soft_wrap=not tty,
                highlight=False,
                width=None if tty else _PIPE_WIDTH,
            )
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


out: Any = _LazyConsole(stderr=False)
err: Any = _LazyConsole(stderr=True)

FORMATS = ("json", "yaml", "name")
"""What `-o` accepts on every verb; without `-o` a verb prints its human view."""


def _check_format(value: str | None) -> str | None:
    if value is not None and value not in FORMATS:
        raise SpecError(f"--output {value!r}: unknown format; valid: {', '.join(FORMATS)}")
    return value


Output = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FORMAT",
        help="json, yaml or name (one name per line, for scripts); default: the human view.",
        callback=_check_format,
        show_default=False,
    ),
]


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


def structured(doc: Any, fmt: str) -> None:
    """A document as `-o json` or `-o yaml` on stdout."""
    if fmt == "json":
        result(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    import yaml

    result(yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, allow_unicode=True))


def tidy(value: Any) -> Any:
    """Machine output without float noise: times to 0.1 s, other floats to 3 decimals."""
    if isinstance(value, dict):
        return {
            k: round(v, 1)
            if k in ("elapsed", "started", "finished") and isinstance(v, float)
            else tidy(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [tidy(v) for v in value]
    if isinstance(value, float):
        return round(value, 3)
    return value


def names(items: Sequence[str]) -> None:
    """`-o name`: one name per line on stdout; nothing at all for none (as kubectl)."""
    if items:
        result("".join(f"{n}\n" for n in items))


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    wrap: Sequence[str] = (),
) -> None:
    """A table on stdout: rich on a terminal; plain aligned columns, never wrapped, otherwise.

    On a terminal the columns named in `wrap` (comma-separated lists) may wrap, after a comma,
    never inside a word; every other column keeps its cells whole.
    """
    if out.is_terminal:
        from rich.table import Table

        t = Table(box=None, pad_edge=False)
        for col in columns:
            t.add_column(col, no_wrap=col not in wrap, overflow="fold")
        for row in rows:
            t.add_row(
                *(
                    str(c).replace(",", ", ") if col in wrap else c
                    for col, c in zip(columns, row, strict=True)
                )
            )
        out.print(t)
        return
    result(plain_table(columns, rows))


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """kubectl's plain table: columns padded to their widest cell, three spaces apart."""
    cells = [[str(c) for c in columns]] + [[_plain(c) for c in row] for row in rows]
    widths = column_widths(columns, rows)
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def column_widths(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[int]:
    """Each column's widest cell, the header included."""
    return [
        max([len(str(col))] + [len(_plain(row[i])) for row in rows])
        for i, col in enumerate(columns)
    ]


def _plain(cell: Any) -> str:
    """A cell's text without styles (rich Text or anything with a str)."""
    plain = getattr(cell, "plain", None)
    return plain if isinstance(plain, str) else str(cell)
