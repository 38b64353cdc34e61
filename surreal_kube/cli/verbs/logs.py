"""`surreal-kube logs NAME PROCESS`: the log of one process, locally or on the cluster.

A process name that is not found gains the closest one as a suggestion.
"""

from __future__ import annotations

import difflib
import time
from typing import Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.errors import SpecError


def _did_you_mean(exc: SpecError, target: str, exp: Any) -> SpecError:
    """`no process 'lerner' ...` gains `did you mean 'learner'?` when one name is close."""

    topo = exp.topology
    role = target.partition("/")[0]
    choices = sorted(
        {p.name for p in topo.processes}
        | {p.role for p in topo.processes}
        | {p.group for p in topo.processes}
    )
    close = difflib.get_close_matches(role, choices, n=1, cutoff=0.6)
    if not close:
        return exc
    rest = target[len(role) :]
    return SpecError(
        f"no process {target!r} in {exp.metadata.name}; did you mean {close[0] + rest!r}?"
    )


def logs(
    name: so.Name,
    target: Annotated[
        str,
        typer.Argument(
            metavar="PROCESS", help="ROLE, ROLE/INDEX or a process name (agents/0, learner)."
        ),
    ],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    tail: Annotated[
        int | None,
        typer.Option("--tail", metavar="N", help="Only the last N lines.", show_default=False),
    ] = None,
    previous: Annotated[
        bool,
        typer.Option("--previous", "-p", help="Cluster: the log of the previous container run."),
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="Cluster: only lines newer than 30s, 5m, 2h ...",
            show_default=False,
        ),
    ] = None,
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Print the log of one process of an experiment.

    Examples:

    \b
      surreal-kube logs exp-ppo-ant learner -f --local
      surreal-kube logs exp-ppo-ant agents/1 --tail 50 --local
      surreal-kube logs exp-ppo-ant learner --previous --since 10m -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        from surreal_kube.launch.kube.lifecycle import pods

        since_seconds = kv.parse_since(since)
        kube = kv.connect(kv.target(kubeconfig, context, namespace), name)
        found = kv.find(kube, name)
        try:
            where = pods.find_pod(kube, found.exp, found.namespace, target)
        except SpecError as exc:
            raise _did_you_mean(exc, target, found.exp) from exc
        for line in pods.logs(
            kube,
            found.namespace,
            where,
            follow=follow,
            previous=previous,
            since_seconds=since_seconds,
            tail=tail,
        ):
            typer.echo(line.decode("utf-8", "replace"), nl=False)
        return
    from surreal_kube.experiment.resolve import load_experiment_file
    from surreal_kube.launch.local import backend

    exp = backend.find(name, root)
    try:
        path = backend.log_file(exp, target)
    except SpecError as exc:
        raise _did_you_mean(exc, target, load_experiment_file(exp.folder.config)) from exc
    with path.open("r", errors="replace") as f:
        lines = f.readlines()
        for text in lines[-tail:] if tail else lines:
            typer.echo(text, nl=False)
        while follow:
            text = f.readline()
            if text:
                typer.echo(text, nl=False)
                continue
            if not backend.find(name, root).running:
                break
            time.sleep(0.3)
