"""`surreal-kube list`: the experiments of this machine (--local) or of the kube context.

Where an experiment lives is one rule for every verb (kube_view.is_local): `--local` or `--root`
mean the local experiments of this machine, found in their folders under the root; otherwise the
current kube context.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import Output, info, names, structured, table, tidy
from surreal_kube.errors import SpecError


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
    output: Output = None,
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Every namespace of the cluster.")
    ] = False,
) -> None:
    """List experiments: the local ones with --local, else those on the kube context.

    Local: phase, age, env steps, learner iterations, eval return. Cluster: phase, age, agents
    ready/total, GPUs, learner iteration.

    Examples:

    \b
      surreal-kube list --local
      surreal-kube list -n rl --context gke
      surreal-kube list -A -o name
    """
    if kv.is_local(None, local, root, kubeconfig, context, namespace):
        if all_namespaces:
            raise SpecError("--all-namespaces is a cluster option; drop it with --local")
        rows = _local_rows(root)
        if output == "name":
            names([r["name"] for r in rows])
        elif output:
            structured(rows, output)
        else:
            _print_local(rows, root)
        return
    kube = kv.connect(kv.target(kubeconfig, context, namespace))
    where, rows = _kube_rows(kube, all_namespaces)
    if output == "name":
        names([r["name"] for r in rows])
    elif output:
        structured(rows, output)
    else:
        _print_kube(rows, where, all_namespaces)


def _kube_rows(kube: Any, all_namespaces: bool) -> tuple[str, list[dict[str, Any]]]:
    """(where it looked, one row per experiment on the cluster)."""
    from surreal_kube.launch.kube.lifecycle import finding, observing
    from surreal_kube.launch.kube.status import progress as kube_progress

    rows = []
    records = kube_progress.read_all(kube, kube.namespace, all_namespaces=all_namespaces)
    for found in finding.list_found(kube, all_namespaces=all_namespaces):
        st = observing.status_of(kube, found, capacity="none")
        kube_progress.merge(st, records.get((found.namespace, found.name)))
        rows.append(
            {
                "name": found.name,
                "namespace": found.namespace,
                "backend": "kube",
                "via": "operator" if found.via_operator else "direct",
                "phase": st.phase,
                "age": observing.age(found.created),
                "agents": st.agents,
                "gpus": st.gpus,
                "learnerIteration": st.learner_iteration,
                "envSteps": st.env_steps,
                "envStepsPerSecond": tidy(st.env_steps_per_second),
                "evalReturn": tidy(st.eval_return),
            }
        )
    label = "every namespace" if all_namespaces else f"namespace {kube.namespace}"
    return f"{label} (context {kube.context})", rows


def _print_kube(rows: list[dict[str, Any]], where: str, all_namespaces: bool) -> None:
    if not rows:
        info(f"no experiments in {where}")
        return
    cols = ["NAME", "PHASE", "AGE", "AGENTS", "GPUS", "ITERATION", "STEPS", "RETURN", "VIA"]
    if all_namespaces:
        cols.insert(0, "NAMESPACE")
    cells = []
    for r in rows:
        row: list[Any] = [
            r["name"],
            kv.phase_text(r["phase"]),
            r["age"],
            r["agents"] or "-",
            str(r["gpus"]),
            "-" if r["learnerIteration"] is None else f"{r['learnerIteration']:,}",
            "-" if r["envSteps"] is None else f"{r['envSteps']:,}",
            "-" if r["evalReturn"] is None else f"{r['evalReturn']:.1f}",
            r["via"],
        ]
        if all_namespaces:
            row.insert(0, r["namespace"])
        cells.append(row)
    table(cols, cells)


def _local_rows(root: Path | None) -> list[dict[str, Any]]:
    from surreal_kube.launch.local import backend

    return [
        {
            "name": e.name,
            "backend": "local",
            "phase": e.phase,
            "age": _age(e.state.get("started")),
            "envSteps": e.state.get("env_steps", 0),
            "learnerIteration": e.state.get("learner_iteration", 0),
            "evalReturn": tidy(e.state.get("eval_return")),
            "folder": str(e.folder.path),
        }
        for e in backend.list_experiments(root)
    ]


def _print_local(rows: list[dict[str, Any]], root: Path | None) -> None:
    if not rows:
        from surreal_kube.launch.local.folder import default_root

        info(f"no local experiments under {(root or default_root()).expanduser()}")
        return
    cells = []
    for r in rows:
        ret = r["evalReturn"]
        cells.append(
            [
                r["name"],
                r["phase"],
                r["age"],
                f"{r['envSteps']:,}",
                f"{r['learnerIteration']:,}",
                "-" if ret is None else f"{ret:.1f}",
            ]
        )
    table(["NAME", "PHASE", "AGE", "ENV STEPS", "ITERATIONS", "EVAL RETURN"], cells)
