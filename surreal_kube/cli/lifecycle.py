"""`list`, `status`, `logs`, `tb`, `delete`: managing experiments by name.

Local experiments are found in their folders under the root; the Kubernetes backend plugs into
the same verbs.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.table import Table

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.local_view import render_state
from surreal_kube.cli.output import info, out, result
from surreal_kube.experiment.resolve import load_experiment_file

Output = Annotated[str, typer.Option("--output", "-o", help="table or json.")]


def _age(started: float | None) -> str:
    if not started:
        return "-"
    s = int(time.time() - started)
    return (
        f"{s // 86400}d"
        if s >= 86400
        else f"{s // 3600}h"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
    )


def list_(root: so.Root = None, output: Output = "table") -> None:
    """List local experiments: phase, age, env steps, learner iterations, latest eval return.

    Examples:

      surreal-kube list

      surreal-kube list -o json
    """
    from surreal_kube.launch.local import backend

    found = backend.list_experiments(root)
    rows = [
        {
            "name": e.name,
            "phase": e.phase,
            "age": _age(e.state.get("started")),
            "envSteps": e.state.get("env_steps", 0),
            "learnerIteration": e.state.get("learner_iteration", 0),
            "evalReturn": e.state.get("eval_return"),
            "folder": str(e.folder.path),
        }
        for e in found
    ]
    if output == "json":
        result(json.dumps(rows, indent=2) + "\n")
        return
    if not rows:
        info("no local experiments")
        return
    table = Table(box=None)
    for col in ("NAME", "PHASE", "AGE", "ENV STEPS", "ITERATIONS", "EVAL RETURN"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        ret = r["evalReturn"]
        table.add_row(
            r["name"],
            r["phase"],
            r["age"],
            f"{r['envSteps']:,}",
            f"{r['learnerIteration']:,}",
            "-" if ret is None else f"{ret:.1f}",
        )
    out.print(table)


def status(name: so.Name, root: so.Root = None, output: Output = "table") -> None:
    """Show each process of an experiment (state, restarts, pid) and its progress.

    Examples:

      surreal-kube status exp-ppo-ant

      surreal-kube status exp-ppo-ant -o json
    """
    from surreal_kube.launch.local import backend

    exp = backend.find(name, root)
    state = dict(exp.state)
    state["phase"] = exp.phase
    if output == "json":
        result(json.dumps(state, indent=2, sort_keys=True) + "\n")
        return
    spec = load_experiment_file(exp.folder.config).spec
    out.print(
        render_state(
            state, max_env_steps=spec.session.max_env_steps, max_time=spec.session.max_time_seconds
        )
    )


def logs(
    name: so.Name,
    target: Annotated[
        str, typer.Argument(help="ROLE, ROLE/INDEX or a process name (agents/0, learner).")
    ],
    root: so.Root = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", help="Only the last N lines.", show_default=False)
    ] = None,
) -> None:
    """Print the log of one process of an experiment.

    Examples:

      surreal-kube logs exp-ppo-ant learner -f

      surreal-kube logs exp-ppo-ant agents/1 --tail 50
    """
    from surreal_kube.launch.local import backend

    exp = backend.find(name, root)
    path = backend.log_file(exp, target)
    with path.open("r", errors="replace") as f:
        lines = f.readlines()
        for line in lines[-tail:] if tail else lines:
            typer.echo(line, nl=False)
        while follow:
            line = f.readline()
            if line:
                typer.echo(line, nl=False)
                continue
            if not backend.find(name, root).running:
                break
            time.sleep(0.3)


def tb(
    name: so.Name,
    root: so.Root = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Local port.", show_default=False)
    ] = None,
) -> None:
    """Find or start the experiment's TensorBoard and print its URL.

    Examples:

      surreal-kube tb exp-ppo-ant
    """
    from surreal_kube.launch.local import backend

    result(backend.tensorboard(backend.find(name, root), port) + "\n")


def delete(
    name: so.Name,
    root: so.Root = None,
    keep_files: Annotated[
        bool, typer.Option("--keep-files", help="Stop it but keep its folder.")
    ] = False,
) -> None:
    """Stop an experiment and remove everything it created.

    Examples:

      surreal-kube delete exp-ppo-ant

      surreal-kube delete exp-ppo-ant --keep-files
    """
    from surreal_kube.launch.local import backend

    exp = backend.delete(name, root, keep_files=keep_files)
    info(f"deleted {name}" + (f" (files kept in {exp.folder.path})" if keep_files else ""))
