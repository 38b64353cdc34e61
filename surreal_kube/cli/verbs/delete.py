"""`surreal-kube delete NAME`: stop an experiment and remove what it created."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import info
from surreal_kube.errors import LaunchError, SpecError


def delete(
    name: so.Name,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Local: delete results and checkpoints without asking (needed when stdin is "
            "not a terminal).",
        ),
    ] = False,
    keep_files: Annotated[
        bool,
        typer.Option("--keep-files", help="Local: stop it but keep its folder (no question)."),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Cluster: return once every object is gone.")
    ] = False,
    delete_data: Annotated[
        bool,
        typer.Option(
            "--delete-data",
            help="Cluster: remove the experiment's data volume (checkpoints, TensorBoard "
            "events, logs, results) too; by default it is kept.",
        ),
    ] = False,
    timeout: Annotated[
        str,
        typer.Option(
            "--timeout", metavar="DURATION", help="Cluster: how long --wait waits (180, 3m, 1h)."
        ),
    ] = "180",
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Stop an experiment and remove everything it created.

    Local: the experiment's folder goes too, with its results, checkpoints and learning curve, so
    delete asks first on a terminal; without a terminal it refuses (exit 2) unless --yes is
    given, or keeps the files with --keep-files. On a cluster, like kubectl delete, it does not
    ask: one delete of the root object removes everything it owns, except the data volume
    (PersistentVolumeClaim <name>-data), which is kept unless --delete-data; delete says which.

    Examples:

    \b
      surreal-kube delete exp-ppo-ant --local
      surreal-kube delete exp-ppo-ant --local --yes
      surreal-kube delete exp-ppo-ant --local --keep-files
      surreal-kube delete exp-ppo-ant --wait -n rl
      surreal-kube delete exp-ppo-ant --delete-data
    """
    seconds = so.parse_duration(timeout, "--timeout") or 0.0
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        from surreal_kube.launch.kube.lifecycle import deleting

        kube = kv.connect(kv.target(kubeconfig, context, namespace), name)
        found = kv.find(kube, name)
        if wait:
            info(f"deleting {name} from namespace {found.namespace}; waiting for its objects...")
        left = deleting.delete(kube, found, wait=wait, timeout=seconds)
        if left:
            raise LaunchError(
                f"{name}: {len(left)} objects still there after {seconds:.0f}s: "
                + ", ".join(left[:5])
            )
        from surreal_kube.launch.kube.placement.storage import settle_data

        data = settle_data(kube, name, found.namespace, delete_data=delete_data)
        gone = " (all gone)" if wait else ""
        info(
            f"deleted {name} from namespace {found.namespace}{gone}" + (f"; {data}" if data else "")
        )
        return
    if delete_data:
        raise SpecError(
            "--delete-data: a cluster option (the data volume); locally the folder goes "
            "unless --keep-files"
        )
    from surreal_kube.launch.local import backend

    exp = backend.find(name, root)
    if not keep_files and not yes:
        _confirm_local_delete(exp)
    backend.delete(name, root, keep_files=keep_files, progress=info)
    info(f"deleted {name}" + (f" (files kept in {exp.folder.path})" if keep_files else ""))


def _confirm_local_delete(exp: Any) -> None:
    """Ask before the results go; without a terminal to ask on, refuse (a careful default)."""
    from surreal_kube.launch.local import backend

    lost = backend.results_of(exp)
    if not lost:
        return  # nothing a person would miss: no results, checkpoints or events yet
    what = f"{exp.name}{' (running)' if exp.running else ''} and {lost} in {exp.folder.path}"
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise SpecError(
            f"delete would remove {what}; stdin is not a terminal, so nothing was asked: "
            "confirm with --yes, or stop it and keep the files with --keep-files"
        )
    if not typer.confirm(f"Delete {what}?", default=False, err=True):
        info("nothing deleted")
        raise typer.Exit(1)
