"""`surreal-kube create`: resolve an experiment and start it on a backend.

Where it runs is the one rule of every verb: `--local` (or `--root DIR`) runs it as processes on
this machine, otherwise it goes to the current kube context.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.image_options import Images, image_chooser, parse_images, registry_of
from surreal_kube.cli.output import err, info, out, result
from surreal_kube.cli.plan_view import planned, print_objects
from surreal_kube.errors import LaunchError, SpecError

if TYPE_CHECKING:
    from surreal_kube.experiment.spec import Experiment


def create(
    name: so.Name,
    files: so.SpecFiles = None,
    algorithm: so.Algorithm = None,
    env: so.Env = None,
    num_agents: so.NumAgents = None,
    num_evals: so.NumEvals = None,
    agent_batch: so.AgentBatch = None,
    max_env_steps: so.MaxEnvSteps = None,
    max_time: so.MaxTime = None,
    sets: so.Sets = None,
    local: so.Local = False,
    root: so.Root = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return at once; the experiment runs on.")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Local: continue an existing experiment from its checkpoint."
        ),
    ] = False,
    restore_from: Annotated[
        Path | None,
        typer.Option(
            "--restore-from",
            metavar="FILE",
            help="Local: start the learner from this checkpoint file.",
            show_default=False,
        ),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace", help="Local: delete a finished experiment of the same name first."
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print what would run and start nothing (kubectl's --dry-run=client; "
            "--dry-run=client and --dry-run=server are accepted as kubectl users type them).",
        ),
    ] = False,
    dry_run_server: Annotated[
        bool,
        typer.Option(
            "--dry-run-server",
            help="Send everything to the API server as a dry run (kubectl's --dry-run=server): "
            "validated and admitted, nothing stored.",
        ),
    ] = False,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
    profile: kv.Profile = None,
    images: Images = None,
    skip_preflight: Annotated[
        bool,
        typer.Option(
            "--skip-preflight",
            help="Do not check that the pods fit the node pools or that images exist; "
            "the scheduler decides (status then says why a pod waits).",
        ),
    ] = False,
    direct: Annotated[
        bool,
        typer.Option(
            "--direct",
            help="Apply the objects from here even when the Experiment CRD is installed.",
        ),
    ] = False,
    build: Annotated[
        bool,
        typer.Option("--build", help="Build (and with --push, push) missing images first."),
    ] = False,
    push: Annotated[
        bool, typer.Option("--push", help="With --build: push to the profile's registry.")
    ] = False,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="Return once applied; do not wait for Running."),
    ] = False,
    timeout: Annotated[
        str,
        typer.Option(
            "--timeout",
            metavar="DURATION",
            help="How long to wait for every pod to run: seconds, or 90s, 5m, 1h.",
        ),
    ] = "600",
) -> None:
    """Create and start an experiment: here with --local, else on the kube context.

    With --local every component runs as a process on this machine (a live view until the
    budget is spent; Ctrl-C stops cleanly; --detach returns at once). Without it the objects go
    to the current kube context and create waits until every pod runs.

    Examples:

    \b
      surreal-kube create exp-ppo-ant --local --env gym:Ant-v5 --max-time 10m
      surreal-kube create exp-ppo-ant --local -d --num-agents 4 --max-time 1h
      surreal-kube create exp-ppo-ant --local --resume --max-time 20m
      surreal-kube config exp-ppo-ant -o yaml > exp.yaml
      surreal-kube create exp-ppo-ant -f exp.yaml --local --max-time 600
      surreal-kube create exp-ppo-ant --dry-run=client --num-agents 8
      surreal-kube create exp-ppo-ant --num-agents 8 -n rl --context gke
      surreal-kube create exp-ppo-ant --dry-run=server --image cpu=reg/rt:1a2b
    """
    is_local = kv.is_local(name, local, root, kubeconfig, context, namespace)
    wait_seconds = so.parse_duration(timeout, "--timeout") or 0.0
    if dry_run and dry_run_server:
        raise SpecError("--dry-run (client) and --dry-run-server (server) exclude each other")
    if resume and replace:
        raise SpecError("--resume and --replace contradict each other; choose one")
    if not is_local:
        local_only = [
            flag
            for flag, given in (
                ("--resume", resume),
                ("--replace", replace),
                ("--restore-from", restore_from is not None),
            )
            if given
        ]
        if local_only:
            raise SpecError(
                f"{local_only[0]} is for local experiments: add --local (on a cluster a "
                "restarted learner resumes from its checkpoint by itself)"
            )
    elif dry_run_server:
        raise SpecError("--dry-run=server needs an API server; with --local use --dry-run")
    else:
        cluster_only = [
            flag
            for flag, given in (
                ("--profile", profile is not None),
                ("--image", bool(images)),
                ("--skip-preflight", skip_preflight),
                ("--direct", direct),
                ("--build", build),
                ("--push", push),
                ("--no-wait", no_wait),
            )
            if given
        ]
        if cluster_only:  # never silently ignored
            raise SpecError(f"{cluster_only[0]} is a cluster option; drop it with --local")
    exp = so.resolve_from_cli(
        name,
        files,
        algorithm,
        env,
        num_agents,
        num_evals,
        agent_batch,
        sets,
        max_env_steps,
        max_time,
    )
    if dry_run and is_local:
        from surreal_kube.launch.local.backend import available_cores, with_agent_batch

        result(describe_plan(with_agent_batch(exp, available_cores()), local=True))
        return
    if not is_local:
        run_kube(
            exp,
            kv.target(kubeconfig, context, namespace),
            profile=profile,
            images=parse_images(images),
            preflight=not skip_preflight,
            direct=direct,
            build=build,
            push=push,
            dry_run="client" if dry_run else "server" if dry_run_server else None,
            wait=not (no_wait or detach),
            timeout=wait_seconds,
        )
        return
    run_local(
        exp, root=root, detach=detach, resume=resume, replace=replace, restore_from=restore_from
    )


def _where_flags(root: Path | None) -> str:
    """The flags that find this local experiment again, for the next-step hints."""
    return f" --root {root}" if root is not None else " --local"


def run_local(
    exp: Experiment,
    *,
    root: Path | None,
    detach: bool,
    resume: bool,
    replace: bool,
    restore_from: Path | None,
) -> None:
    """Start a local experiment in the foreground (live view) or detached.

    The live view is drawn only on a terminal; in a pipe or a log file the phase changes are
    printed as whole lines and the final state once, so nothing is cut or joined.
    """
    from surreal_kube.cli.local_view import RateMeter, render_state
    from surreal_kube.launch.local import backend
    from surreal_kube.launch.local.supervisor import budget_note, supervise

    exp, folder, wiring, elapsed_before = backend.prepare(
        exp, root=root, resume=resume, replace=replace, restore_from=restore_from
    )
    name = exp.metadata.name
    where = _where_flags(root)
    info(budget_note(exp, detach=detach))
    if detach:
        pid = backend.start_detached(folder)
        info(f"experiment {name} is running (supervisor pid {pid}); folder {folder.path}")
        info(f"  surreal-kube status {name}{where}")
        info(f"  surreal-kube logs {name} learner -f{where}")
        info(f"  surreal-kube tb {name}{where}")
        info(f"  surreal-kube delete {name}{where}")
        result(str(folder.path))
        return
    session = exp.spec.session
    rates = RateMeter()

    def view(sup: Any) -> Any:
        return render_state(
            sup.state_dict(),
            max_env_steps=session.max_env_steps,
            max_time=session.max_time_seconds,
            rates=rates,
        )

    if err.is_terminal:
        from rich.live import Live

        with Live(console=err.console, refresh_per_second=2, transient=False) as live:
            sup, picture = supervise(
                exp,
                folder,
                wiring,
                elapsed_before=elapsed_before,
                tick=lambda s: live.update(view(s)),
            )
            live.update(view(sup))
    else:
        last = [""]

        def tick(sup: Any) -> None:
            phase = str(sup.phase)
            if phase != last[0]:
                info(f"{name}: {phase}")
                last[0] = phase

        sup, picture = supervise(exp, folder, wiring, elapsed_before=elapsed_before, tick=tick)
        err.print(view(sup))
    info(f"{name}: {sup.phase.lower()} ({sup.reason}); results in {folder.results}")
    if out.is_terminal:
        result(f"learning curve: {picture}")
    else:  # stdout is for scripts: the bare path; a person reading stderr sees it labelled
        if err.is_terminal:
            info(f"learning curve: {picture}")
        result(str(picture))
    if sup.phase == "Failed":
        raise typer.Exit(1)


def describe_plan(exp: Experiment, *, local: bool) -> str:
    """What `create` would start: the resolved spec, then one line per process."""
    from surreal_kube.experiment.resolve import dump_yaml

    topo = exp.topology
    backend = "local processes" if local else "Kubernetes"
    lines = [dump_yaml(exp).rstrip("\n"), "---", f"# would start on {backend}:"]
    for p in topo.processes:
        ids = f" agents {list(p.agent_ids)}" if p.agent_ids else ""
        lines.append(f"# {p.name}: surreal-kube-role {p.role} --id {p.index}{ids}")
    return "\n".join(lines) + "\n"


def run_kube(
    exp: Experiment,
    where: kv.Target,
    *,
    profile: Path | None,
    images: dict[str, str],
    preflight: bool,
    direct: bool,
    build: bool,
    push: bool,
    dry_run: str | None,
    wait: bool,
    timeout: float,
) -> None:
    """Create the experiment on the cluster: pre-flight, apply, then a live view until Running.

    One plan (`launch/kube/plan.py`) per run: the dry run prints its objects, a direct create
    applies them, and through the operator the `Experiment` carries the same spec and the
    chosen profile, from which the operator makes the same plan.
    """
    from surreal_kube.launch.kube.lifecycle import creating, deleting, finding, waiting
    from surreal_kube.launch.kube.profile import load_profile
    from surreal_kube.launch.kube.render.objects import dump_objects

    prof = load_profile(profile) if profile is not None else None
    registry = registry_of(prof, where.context, where.kubeconfig)
    if dry_run == "client":
        objects = planned(exp, where.namespace, profile=prof, images=images, registry=registry)
        print_objects(objects.objects, None)
        return
    kube = kv.connect(where, exp.metadata.name, creating=True)
    kube.raw("GET", "/version", what="reach the API server")  # unreachable: say so first
    chooser = image_chooser(registry, images, build=build, push=push, check=preflight)
    plan = creating.plan_create(
        kube, exp, profile=prof, preflight=preflight, images=chooser, direct=direct
    )
    name = exp.metadata.name
    via = "through the operator" if plan.via_operator else "directly"
    if plan.via_operator and prof is None:
        info(
            f"{name}: no --profile, so the operator renders it with its own profile (the "
            "cluster's volume, pools and pull secrets); pre-flight here used the live nodes"
        )
    if dry_run == "server":
        applied = creating.create(kube, plan, dry_run="server")
        info(f"{name}: the API server accepted {len(applied)} objects (dry run, nothing stored)")
        result(dump_objects(applied, "yaml"))
        return
    info(f"creating {name} in namespace {plan.namespace} (context {kube.context}) {via}")
    creating.create(kube, plan, progress=info)
    if waits := plan.placements.waiting_for():
        info(f"{name}: {waits} (nodes now -> nodes it needs, at the least)")
    if not wait:
        _next_steps(name, plan.namespace)
        return
    started = time.monotonic()
    try:
        status = _wait_running(kube, plan, name, started, timeout)
    except waiting.RefusedError as exc:
        # the operator refused it (or none runs): leave nothing behind
        found = finding.find_or_none(kube, name, plan.namespace)
        if found is not None:
            deleting.delete(kube, found, wait=True, timeout=60)
        raise LaunchError(f"{exc}; {name} was deleted again") from exc
    took = time.monotonic() - started
    if status.phase == "Succeeded":  # a short run ended before its slowest pod was ready
        info(f"{name} finished before every pod was ready ({took:.0f}s): {status.reason}")
        info(f"  surreal-kube results {name} -n {plan.namespace}")
        info(f"  surreal-kube delete {name} --wait -n {plan.namespace}")
        result(name)
        return
    info(f"{name} is running: {status.ready} pods, {status.agents} agents ({took:.0f}s)")
    _next_steps(name, plan.namespace)
    result(name)


def _wait_running(kube: Any, plan: Any, name: str, started: float, timeout: float) -> Any:
    """Wait for Running: a live view on a terminal, one line per change otherwise."""
    from surreal_kube.launch.kube.lifecycle import waiting

    if err.is_terminal:
        from rich.live import Live

        with Live(console=err.console, refresh_per_second=2, transient=False) as live:
            return waiting.wait_running(
                kube,
                plan,
                timeout=timeout,
                tick=lambda st: live.update(kv.progress_view(name, st, started)),
            )
    last: list[Any] = ["", None]

    def tick(status: Any) -> None:
        last[1] = status
        line = f"{status.phase} {status.ready} pods ready"
        if line != last[0]:
            info(line)
            last[0] = line

    try:
        return waiting.wait_running(kube, plan, timeout=timeout, tick=tick)
    finally:
        if last[1] is not None:  # the components once, as they ended up
            err.print(kv.progress_view(name, last[1], started))


def _next_steps(name: str, namespace: str) -> None:
    ns = f" -n {namespace}"
    info(f"  surreal-kube status {name}{ns}")
    info(f"  surreal-kube logs {name} learner -f{ns}")
    info(f"  surreal-kube tb {name}{ns}")
    info(f"  surreal-kube delete {name} --wait{ns}")
