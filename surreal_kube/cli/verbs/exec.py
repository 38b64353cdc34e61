"""`surreal-kube exec NAME ROLE -- CMD`: run a command in one process's container on the cluster."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.errors import LaunchError


def exec_(
    name: so.Name,
    target: Annotated[
        str,
        typer.Argument(
            metavar="PROCESS", help="ROLE, ROLE/INDEX or a process name (agents/0, learner)."
        ),
    ],
    command: Annotated[
        list[str],
        typer.Argument(metavar="-- COMMAND...", help="The command and its arguments, after --."),
    ],
    timeout: Annotated[
        str,
        typer.Option(
            "--timeout", metavar="DURATION", help="How long the command may run (300, 5m)."
        ),
    ] = "300",
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Run a command in one process's container on the cluster; exit with its exit code.

    Goes through the API server (no kubectl needed); no tty, no stdin.

    Examples:

    \b
      surreal-kube exec exp-ppo-ant learner -- ls /experiment/checkpoints
      surreal-kube exec exp-ppo-ant agents/3 -n rl -- env
    """
    from surreal_kube.launch.kube.lifecycle import pods

    seconds = so.parse_duration(timeout, "--timeout") or 0.0
    kube = kv.connect(kv.target(kubeconfig, context, namespace), name)
    found = kv.find(kube, name)
    where = pods.find_pod(kube, found.exp, found.namespace, target)
    done = pods.exec_in(kube, found.namespace, where, command, timeout=seconds)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.stdout.flush()
    if done.error:
        raise LaunchError(f"{where.pod}/{where.container}: {done.error}")
    if done.code:
        raise typer.Exit(done.code)
