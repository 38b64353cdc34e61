"""`list`, `status`, `logs`, `tb`, `delete`: managing experiments by name.

Local experiments are found in their folders under the root; experiments on a cluster through
the current kube context. A NAME verb works on a local experiment when `--local` (or `--root`)
is given or a local folder of that name exists, otherwise on the cluster (kube_view.is_local).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.local_view import render_state
from surreal_kube.cli.output import info, out, result
from surreal_kube.errors import LaunchError
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


def list_(
    root: so.Root = None,
    output: Output = "table",
    local: so.Local = False,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Cluster: every namespace.")
    ] = False,
) -> None:
    """List experiments, local and on the cluster.

    Local: phase, age, env steps, learner iterations, eval return. Cluster: phase, age, agents
    ready/total, GPUs. With --local or --root only local ones; with a kube flag only the
    cluster's; else both (the cluster when a kubeconfig exists).

    Examples:

      surreal-kube list

      surreal-kube list -o json

      surreal-kube list -n rl --context gke
    """
    kube_flags = (kubeconfig, context, namespace, True if all_namespaces else None)
    only_local = local or root is not None
    only_kube = not only_local and any(f is not None for f in kube_flags)
    kube_rows: list[dict[str, Any]] = []
    local_rows: list[dict[str, Any]] = []
    kube_name = ""
    if not only_local and (only_kube or kv.kube_available()):
        try:
            kube_name, kube_rows = _kube_rows(
                kv.target(kubeconfig, context, namespace), all_namespaces
            )
        except LaunchError as exc:
            if only_kube:
                raise
            info(f"cluster: not listed ({exc})")
    if not only_kube:
        local_rows = _local_rows(root)
    if output == "json":
        result(json.dumps(local_rows + kube_rows, indent=2) + "\n")
        return
    if not only_kube:
        _print_local(local_rows)
    if kube_name:
        _print_kube(kube_rows, kube_name, all_namespaces)


def _kube_rows(where: kv.Target, all_namespaces: bool) -> tuple[str, list[dict[str, Any]]]:
    """(where it looked, one row per experiment on the cluster)."""
    from surreal_kube.launch.kube import cluster

    kube = where.connect()
    rows = []
    for found in cluster.list_found(kube, all_namespaces=all_namespaces):
        st = cluster.status_of(kube, found, capacity="none")
        rows.append(
            {
                "name": found.name,
                "namespace": found.namespace,
                "backend": "kube",
                "via": "operator" if found.via_operator else "direct",
                "phase": st.phase,
                "age": cluster.age(found.created),
                "agents": st.agents,
                "gpus": st.gpus,
                "learnerIteration": st.learner_iteration,
                "evalReturn": st.eval_return,
            }
        )
    label = "every namespace" if all_namespaces else f"namespace {kube.namespace}"
    return f"{label} (context {kube.context})", rows


def _print_kube(rows: list[dict[str, Any]], where: str, all_namespaces: bool) -> None:
    if not rows:
        info(f"no experiments on the cluster in {where}")
        return
    table = Table(box=None)
    cols = ["NAME", "PHASE", "AGE", "AGENTS", "GPUS", "ITERATION", "VIA"]
    if all_namespaces:
        cols.insert(0, "NAMESPACE")
    for col in cols:
        table.add_column(col, no_wrap=True)
    for r in rows:
        cells: list[Any] = [
            r["name"],
            kv.phase_text(r["phase"]),
            r["age"],
            r["agents"] or "-",
            str(r["gpus"]),
            "-" if r["learnerIteration"] is None else f"{r['learnerIteration']:,}",
            r["via"],
        ]
        if all_namespaces:
            cells.insert(0, r["namespace"])
        table.add_row(*cells)
    out.print(table)


def _local_rows(root: Path | None) -> list[dict[str, Any]]:
    from surreal_kube.launch.local import backend

    return [
        {
            "name": e.name,
            "phase": e.phase,
            "age": _age(e.state.get("started")),
            "envSteps": e.state.get("env_steps", 0),
            "learnerIteration": e.state.get("learner_iteration", 0),
            "evalReturn": e.state.get("eval_return"),
            "folder": str(e.folder.path),
        }
        for e in backend.list_experiments(root)
    ]


def _print_local(rows: list[dict[str, Any]]) -> None:
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


def status(
    name: so.Name,
    root: so.Root = None,
    output: Output = "table",
    local: so.Local = False,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Show each process of an experiment (state, restarts, pid or pod) and its progress.

    On a cluster: each component and pod (phase, restarts, node) and, for a pending pod, the
    scheduler's reason in plain words.

    Examples:

      surreal-kube status exp-ppo-ant

      surreal-kube status exp-ppo-ant -o json -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        _status_kube(name, kv.target(kubeconfig, context, namespace), output)
        return
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


def _status_kube(name: str, where: kv.Target, output: str) -> None:
    from surreal_kube.launch.kube import cluster

    kube = where.connect()
    found = cluster.find(kube, name)
    st = cluster.status_of(kube, found)
    if output == "json":
        doc = kv.status_json(st)
        doc["namespace"] = found.namespace
        doc["via"] = "operator" if found.via_operator else "direct"
        result(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return
    via = "Experiment object, operator" if found.via_operator else "applied directly"
    out.print(kv.status_view(name, found.namespace, st, via))


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
    previous: Annotated[
        bool,
        typer.Option("--previous", "-p", help="Cluster: the log of the previous container run."),
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Cluster: only lines newer than 30s, 5m, 2h ...", show_default=False
        ),
    ] = None,
    local: so.Local = False,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Print the log of one process of an experiment.

    Examples:

      surreal-kube logs exp-ppo-ant learner -f

      surreal-kube logs exp-ppo-ant agents/1 --tail 50

      surreal-kube logs exp-ppo-ant learner --previous --since 10m -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        from surreal_kube.launch.kube import cluster, pods

        kube = kv.target(kubeconfig, context, namespace).connect()
        found = cluster.find(kube, name)
        where = pods.find_pod(kube, found.exp, found.namespace, target)
        for line in pods.logs(
            kube,
            found.namespace,
            where,
            follow=follow,
            previous=previous,
            since_seconds=kv.parse_since(since),
            tail=tail,
        ):
            typer.echo(line.decode("utf-8", "replace"), nl=False)
        return
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
    local: so.Local = False,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Find or start the experiment's TensorBoard and print its URL.

    On a cluster: port-forward through the API server to the experiment's TensorBoard pod,
    print the local URL and keep forwarding until Ctrl-C or SIGTERM (both exit 0).

    Examples:

      surreal-kube tb exp-ppo-ant

      surreal-kube tb exp-ppo-ant --port 6006 -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        _tb_kube(name, kv.target(kubeconfig, context, namespace), port)
        return
    from surreal_kube.launch.local import backend

    result(backend.tensorboard(backend.find(name, root), port) + "\n")


def _tb_kube(name: str, where: kv.Target, port: int | None) -> None:
    from surreal_kube.experiment.topology import ENDPOINTS
    from surreal_kube.launch.kube import cluster, pods
    from surreal_kube.launch.kube.portforward import Forwarder

    kube = where.connect()
    found = cluster.find(kube, name)
    pod = pods.find_pod(kube, found.exp, found.namespace, "tensorboard")
    remote = ENDPOINTS["tensorboard"].port
    with Forwarder(kube, found.namespace, pod.pod, remote, local_port=port or 0) as fwd:
        info(f"forwarding {fwd.url} -> {pod.pod}:{remote} (Ctrl-C to stop)")
        result(fwd.url + "\n")
        with contextlib.suppress(KeyboardInterrupt):
            fwd.wait()


def delete(
    name: so.Name,
    root: so.Root = None,
    keep_files: Annotated[
        bool, typer.Option("--keep-files", help="Stop it but keep its folder.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Cluster: return once every object is gone.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Cluster: seconds --wait waits.")
    ] = 180.0,
    local: so.Local = False,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Stop an experiment and remove everything it created.

    On a cluster one delete of the root object removes everything it owns.

    Examples:

      surreal-kube delete exp-ppo-ant

      surreal-kube delete exp-ppo-ant --keep-files

      surreal-kube delete exp-ppo-ant --wait -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        from surreal_kube.launch.kube import cluster

        kube = kv.target(kubeconfig, context, namespace).connect()
        found = cluster.find(kube, name)
        left = cluster.delete(kube, found, wait=wait, timeout=timeout)
        if left:
            raise LaunchError(
                f"{name}: {len(left)} objects still there after {timeout:.0f}s: "
                + ", ".join(left[:5])
            )
        info(f"deleted {name} from namespace {found.namespace}" + (" (all gone)" if wait else ""))
        return
    from surreal_kube.launch.local import backend

    exp = backend.delete(name, root, keep_files=keep_files)
    info(f"deleted {name}" + (f" (files kept in {exp.folder.path})" if keep_files else ""))
