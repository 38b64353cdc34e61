"""The root `surreal-kube` app and its error boundary.

Errors are converted here, once: a SurrealKubeError becomes one line and its exit code (2 for bad
input, 1 for a failed operation); a usage error (unknown option, missing argument) becomes one
line and exit 2; anything unexpected becomes one line too, with the traceback only when
SURREAL_KUBE_DEBUG is set.

Start-up is kept light (`--help` in well under half a second): the verbs' modules import only
typer, rich and the error classes at module level; the spec models, the Kubernetes client,
torch and ZeroMQ are imported inside the functions that need them.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from types import FrameType
from typing import Annotated

import typer

from surreal_kube.cli.help_format import install as install_help_format
from surreal_kube.cli.output import err
from surreal_kube.cli.verbs import (
    build,
    config,
    create,
    delete,
    logs,
    registry,
    render,
    results,
    scale,
    status,
    tb,
    topology,
)
from surreal_kube.cli.verbs import exec as exec_verb
from surreal_kube.cli.verbs import list as list_verb
from surreal_kube.errors import SpecError, SurrealKubeError

PROG = "surreal-kube"
install_help_format()

app = typer.Typer(
    name=PROG,
    help="Run distributed reinforcement-learning experiments as local processes or as pods.\n\n"
    "Where an experiment lives: --local (or --root DIR) means the local experiments on this "
    "machine, for every verb; without them a verb works on the current kube context "
    "(--kubeconfig, --context, --namespace as kubectl reads them).\n\n"
    "Examples:\n\n\b\n"
    "  surreal-kube create exp-ppo-ant --local --env gym:Ant-v5 --max-time 10m\n"
    "  surreal-kube list --local\n"
    "  surreal-kube create exp-ppo-ant --env gym:Ant-v5 -n rl\n"
    "  surreal-kube status exp-ppo-ant -n rl -o json",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 160},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("surreal-kube")
        except PackageNotFoundError:  # running from a source tree that was never installed
            number = "unknown"
        typer.echo(f"{PROG} {number}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """The root callback exists for --version only; the app's help is typer.Typer's above."""


# One line each in `surreal-kube --help`; the verbs' own help says the rest.
app.command(short_help="Create and start an experiment (--local: here; else on the cluster).")(
    create.create
)
app.command(short_help="Print the fully resolved experiment spec.")(config.config)
app.command(short_help="Show the process graph: processes, binds, connects.")(topology.topology)
app.command(short_help="Print the experiment's Kubernetes objects (no cluster needed).")(
    render.render
)
app.command(short_help="Build (and push) the images the experiment runs.")(build.build)
app.command(short_help="Set where images are pushed and pulled from, per kube context.")(
    registry.registry
)
app.command("list", short_help="List experiments (--local: on this machine).")(list_verb.list_)
app.command(short_help="Show an experiment's processes and progress.")(status.status)
app.command(short_help="Print the log of one process.")(logs.logs)
app.command(short_help="Find or start the experiment's TensorBoard; print its URL.")(tb.tb)
app.command(short_help="Stop an experiment and remove what it created.")(delete.delete)
app.command("exec", short_help="Run a command in a process's container on the cluster.")(
    exec_verb.exec_
)
app.command(short_help="Change the number of agents of a running experiment.")(scale.scale)
app.command(short_help="Fetch a finished run's results (summary, curve, picture).")(results.results)


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so that every verb that stops cleanly on one does on both."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def _error(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)


def _usage_message(exc: Exception) -> str:
    """A click usage error as one line: its message and where to read the verb's help."""
    from typer._click.exceptions import UsageError

    text = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    text = " ".join(text.split())
    text = re.sub(r" \(Possible options: ([^)]*)\)", r"; did you mean \1?", text)
    text = re.sub(r"Input should be a valid integer.*", "must be an integer", text)
    text = re.sub(r"Input should be a valid number.*", "must be a number", text)
    if text[:1].isupper() and not text[1:2].isupper():
        text = text[0].lower() + text[1:]
    ctx = getattr(exc, "ctx", None) if isinstance(exc, UsageError) else None
    verb = ctx.command_path if ctx is not None else PROG
    return f"{text.rstrip('.')} (see '{verb} --help')"


_DRY_RUN = {"client": ["--dry-run"], "server": ["--dry-run-server"], "none": []}


def kubectl_habits(argv: list[str]) -> list[str]:
    """Accept `--dry-run=client|server|none` as kubectl users type it.

    Bare `--dry-run` stays the client-side dry run and `--dry-run-server` the server-side one;
    anything after `--` (the command of `exec`) is left alone.
    """
    args: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return args + argv[i:]
        if arg.startswith("--dry-run="):
            value = arg.partition("=")[2]
            if value not in _DRY_RUN:
                raise SpecError(f"--dry-run={value}: unknown mode; valid: client, server, none")
            args.extend(_DRY_RUN[value])
        else:
            args.append(arg)
    return args


def run(argv: list[str] | None = None) -> None:
    """Console-script entry point.

    SIGTERM is turned into the same clean stop as Ctrl-C. A job started in the background by a
    non-interactive shell inherits SIGINT as ignored (and Python keeps it so), so SIGTERM is the
    one stop signal a long-running verb (`tb`, `logs -f`) can always be given.
    """
    from typer import Abort
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    signal.signal(signal.SIGTERM, _terminate)
    try:
        args = kubectl_habits(sys.argv[1:] if argv is None else list(argv))
        code = app(args=args, prog_name=PROG, standalone_mode=False)
    except SurrealKubeError as exc:
        _error(str(exc))
        sys.exit(exc.exit_code)
    except NoArgsIsHelpError as exc:  # `surreal-kube` alone: its help, like kubectl
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else str(exc))
        sys.exit(0)
    except ClickException as exc:
        _error(_usage_message(exc))
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, Abort) as exc:
        err.print("terminated" if isinstance(exc, Terminated) else "interrupted")
        sys.exit(128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT))
    except BrokenPipeError:  # `surreal-kube list | head -1`
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:  # the one place unexpected errors are caught
        if os.environ.get("SURREAL_KUBE_DEBUG"):
            raise
        if type(exc).__module__.startswith("urllib3"):  # a client call outside kube.client's
            from surreal_kube.launch.kube.api.client import unreachable_error

            _error(str(unreachable_error(exc)))
            sys.exit(1)
        _error(
            f"unexpected {type(exc).__name__}: {exc} (set SURREAL_KUBE_DEBUG=1 for the traceback)"
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    run()
