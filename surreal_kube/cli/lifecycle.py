"""`list`, `status`, `logs`, `tb`, `delete`: managing experiments by name.

Where an experiment lives is one rule for every verb (kube_view.is_local): `--local` or `--root`
mean the local experiments of this machine, found in their folders under the root; otherwise the
current kube context. A name not found says where it was looked for.
"""

from __future__ import annotations

import contextlib
import difflib
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import Output, info, names, out, result, structured, table
from surreal_kube.errors import LaunchError, SpecError


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


def _tidy(value: Any) -> Any:
    """Machine output without float noise: times to 0.1 s, other floats to 3 decimals."""
    if isinstance(value, dict):
        return {
            k: round(v, 1)
            if k in ("elapsed", "started", "finished") and isinstance(v, float)
            else _tidy(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_tidy(v) for v in value]
    if isinstance(value, float):
        return round(value, 3)
    return value


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
                "envStepsPerSecond": _tidy(st.env_steps_per_second),
                "evalReturn": _tidy(st.eval_return),
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
            "evalReturn": _tidy(e.state.get("eval_return")),
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


def status(
    name: so.Name,
    output: Output = None,
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Show each process of an experiment (state, restarts, pid or pod) and its progress.

    On a cluster: each component and pod (phase, restarts, node) and, for a pending pod, the
    scheduler's reason in plain words.

    Examples:

    \b
      surreal-kube status exp-ppo-ant --local
      surreal-kube status exp-ppo-ant -o json -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        _status_kube(name, kv.target(kubeconfig, context, namespace), output)
        return
    from surreal_kube.cli.local_view import render_state
    from surreal_kube.experiment.resolve import load_experiment_file
    from surreal_kube.launch.local import backend

    exp = backend.find(name, root)
    state = dict(exp.state)
    state["phase"] = exp.phase
    if output == "name":
        names([name])
        return
    if output:
        structured(_tidy(state), output)
        return
    spec = load_experiment_file(exp.folder.config).spec
    out.print(
        render_state(
            state, max_env_steps=spec.session.max_env_steps, max_time=spec.session.max_time_seconds
        )
    )


def _status_kube(name: str, where: kv.Target, output: str | None) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from surreal_kube.launch.kube import naming
    from surreal_kube.launch.kube.api import watch as kube_watch
    from surreal_kube.launch.kube.lifecycle import observing
    from surreal_kube.launch.kube.status import progress as kube_progress

    kube = kv.connect(where, name)
    # three independent reads at once (the object, its pods, its progress): each is a round
    # trip, and a thousand pods are the longest answer
    with ThreadPoolExecutor(max_workers=2) as pool:
        pods = pool.submit(
            kube_watch.list_pods, kube, kube.namespace, naming.experiment_selector(name)
        )
        record = pool.submit(kube_progress.read, kube, name, kube.namespace)
        found = kv.find(kube, name)
        found.pods = pods.result()
        st = observing.status_of(kube, found)
        kube_progress.merge(st, record.result())
    if output == "name":
        names([name])
        return
    if output:
        doc = kv.status_json(st)
        doc["namespace"] = found.namespace
        doc["via"] = "operator" if found.via_operator else "direct"
        structured(_tidy(doc), output)
        return
    via = "Experiment object, operator" if found.via_operator else "applied directly"
    out.print(kv.status_view(name, found.namespace, st, via), soft_wrap=True)


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


def tb(
    name: so.Name,
    port: Annotated[
        int | None,
        typer.Option("--port", metavar="PORT", help="Local port.", show_default=False),
    ] = None,
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Find or start the experiment's TensorBoard and print its URL.

    Local: the running experiment's TensorBoard, else one started on its folder (it keeps
    running; `delete` stops it). On a cluster: port-forward through the API server to the
    experiment's TensorBoard pod, print the local URL and keep forwarding until Ctrl-C or SIGTERM
    (both exit 0).

    Examples:

    \b
      surreal-kube tb exp-ppo-ant --local
      surreal-kube tb exp-ppo-ant --port 6006 -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        _tb_kube(name, kv.target(kubeconfig, context, namespace), port)
        return
    from surreal_kube.launch.local import backend

    result(backend.tensorboard(backend.find(name, root), port) + "\n")


def _tb_kube(name: str, where: kv.Target, port: int | None) -> None:
    from surreal_kube.experiment.topology import ENDPOINTS
    from surreal_kube.launch.kube.api.portforward import Forwarder
    from surreal_kube.launch.kube.lifecycle import pods

    kube = kv.connect(where, name)
    found = kv.find(kube, name)
    pod = pods.find_pod(kube, found.exp, found.namespace, "tensorboard")
    remote = ENDPOINTS["tensorboard"].port
    with Forwarder(kube, found.namespace, pod.pod, remote, local_port=port or 0) as fwd:
        info(f"forwarding {fwd.url} -> {pod.pod}:{remote} (Ctrl-C to stop)")
        result(fwd.url + "\n")
        with contextlib.suppress(KeyboardInterrupt):
            fwd.wait()


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
