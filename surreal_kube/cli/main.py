"""The root `surreal-kube` app and its error boundary.

Errors are converted here, once: a SurrealKubeError becomes one line and its exit code (2 for bad
input, 1 for a failed operation); anything unexpected becomes one line too, with the traceback only
when SURREAL_KUBE_DEBUG is set.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

import typer

from surreal_kube.cli import (
    build_cmd,
    config_cmd,
    create,
    exec_cmd,
    lifecycle,
    render_cmd,
    scale_cmd,
    topology_cmd,
)
from surreal_kube.cli.output import err
from surreal_kube.errors import SurrealKubeError

app = typer.Typer(
    name="surreal-kube",
    help="Run distributed reinforcement-learning experiments as local processes or as pods.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command()(create.create)
app.command()(config_cmd.config)
app.command()(topology_cmd.topology)
app.command()(render_cmd.render)
app.command()(build_cmd.build)
app.command("list")(lifecycle.list_)
app.command()(lifecycle.status)
app.command()(lifecycle.logs)
app.command()(lifecycle.tb)
app.command()(lifecycle.delete)
app.command("exec")(exec_cmd.exec_)
app.command()(scale_cmd.scale)


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so that every verb that stops cleanly on one does on both."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def run(argv: list[str] | None = None) -> None:
    """Console-script entry point.

    SIGTERM is turned into the same clean stop as Ctrl-C. A job started in the background by a
    non-interactive shell inherits SIGINT as ignored (and Python keeps it so), so SIGTERM is the
    one stop signal a long-running verb (`tb`, `logs -f`) can always be given.
    """
    signal.signal(signal.SIGTERM, _terminate)
    try:
        app(args=argv, standalone_mode=True)
    except SurrealKubeError as exc:
        err.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        err.print("terminated" if isinstance(exc, Terminated) else "interrupted")
        sys.exit(128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT))
    except Exception as exc:  # the one place unexpected errors are caught
        if os.environ.get("SURREAL_KUBE_DEBUG"):
            raise
        err.print(
            f"[bold red]error:[/] unexpected {type(exc).__name__}: {exc} "
            "(set SURREAL_KUBE_DEBUG=1 for the traceback)",
            markup=True,
            highlight=False,
        )
        sys.exit(1)


if __name__ == "__main__":
    run()
