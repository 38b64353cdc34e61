"""`surreal-kube create`: resolve an experiment and start it on a backend."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.live import Live

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.local_view import RateMeter, render_state
from surreal_kube.cli.output import abort, err, info, result
from surreal_kube.cli.render_cmd import Images, Profile, parse_images
from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.resolve import dump_yaml, experiment_topology
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
        bool, typer.Option("--resume", help="Continue an existing experiment from its checkpoint.")
    ] = False,
    restore_from: Annotated[
        Path | None,
        typer.Option(
            "--restore-from",
            help="Start the learner from this checkpoint file.",
            show_default=False,
        ),
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Delete a finished experiment of the same name first.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would run; start nothing.")
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
    profile: Profile = None,
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
        float, typer.Option("--timeout", help="Seconds to wait for every pod to run.")
    ] = 600.0,
) -> None:
    """Create and start an experiment.

    Examples:

      surreal-kube create exp-ppo-ant --local --algorithm ppo --env gym:Ant-v5 --max-time 600

      surreal-kube create exp-ppo-ant --local --detach --num-agents 4

      surreal-kube create exp-ppo-ant --local --resume --max-time 1200

      surreal-kube create exp-ppo-ant --dry-run --num-agents 8 --agent-batch 4

      surreal-kube create exp-ppo-ant --env gym:Ant-v5 --num-agents 8 -n rl --context gke

      surreal-kube create exp-ppo-ant --dry-run-server --image cpu=registry/runtime:1a2b3c
    """
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
    if resume and replace:
        abort("--resume and --replace contradict each other; choose one", 2)
    if dry_run and local:
        result(describe_plan(exp, local=local))
        return
    if not local:
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
            timeout=timeout,
        )
        return
    run_local(
        exp, root=root, detach=detach, resume=resume, replace=replace, restore_from=restore_from
    )


def run_local(
    exp: Experiment,
    *,
    root: Path | None,
    detach: bool,
    resume: bool,
    replace: bool,
    restore_from: Path | None,
) -> None:
    """Start a local experiment in the foreground (live view) or detached."""
    from surreal_kube.launch.local import backend
    from surreal_kube.launch.local.supervisor import supervise

    exp, folder, ports, elapsed_before = backend.prepare(
        exp, root=root, resume=resume, replace=replace, restore_from=restore_from
    )
    name = exp.metadata.name
    if detach:
        pid = backend.start_detached(folder)
        info(f"experiment {name} is running (supervisor pid {pid}); folder {folder.path}")
        info(f"  surreal-kube status {name}   surreal-kube logs {name} learner -f")
        info(f"  surreal-kube tb {name}       surreal-kube delete {name}")
        result(str(folder.path))
        return
    session = exp.spec.session
    rates = RateMeter()
    with Live(console=err, refresh_per_second=2, transient=False) as live:

        def tick(sup: object) -> None:
            live.update(
                render_state(
                    sup.state_dict(),  # type: ignore[attr-defined]
                    max_env_steps=session.max_env_steps,
                    max_time=session.max_time_seconds,
                    rates=rates,
                )
            )

        sup, picture = supervise(exp, folder, ports, elapsed_before=elapsed_before, tick=tick)
        tick(sup)
    info(f"{name}: {sup.phase.lower()} ({sup.reason}); results in {folder.results}")
    info(f"learning curve: {picture}")
    result(str(picture))
    if sup.phase == "Failed":
        raise typer.Exit(1)


def describe_plan(exp: Experiment, *, local: bool) -> str:
    """What `create` would start: the resolved spec, then one line per process."""
    topo = experiment_topology(exp)
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
    """Create the experiment on the cluster: pre-flight, apply, then a live view until Running."""
    from surreal_kube.launch.kube import cluster
    from surreal_kube.launch.kube.profile import load_profile
    from surreal_kube.launch.kube.render import dump_objects, render_experiment

    prof = load_profile(profile) if profile is not None else None
    if dry_run == "client":
        refs = resolve_images(exp, prof, images, build=False, push=False, check=False)
        pinned = cluster.pin_images(exp, refs)
        ns = where.namespace or exp.metadata.namespace or "default"
        objects = render_experiment(pinned, ns, images=refs, profile=prof)
        result(dump_objects(objects, "yaml"))
        return
    kube = where.connect()
    refs = resolve_images(exp, prof, images, build=build, push=push, check=preflight)
    plan = cluster.plan_create(
        kube, exp, profile=prof, preflight=preflight, images=refs, direct=direct
    )
    name = exp.metadata.name
    via = "through the operator" if plan.via_operator else "directly"
    if dry_run == "server":
        applied = cluster.create(kube, plan, dry_run="server")
        info(f"{name}: the API server accepted {len(applied)} objects (dry run, nothing stored)")
        result(dump_objects(applied, "yaml"))
        return
    info(f"creating {name} in namespace {plan.namespace} (context {kube.context}) {via}")
    cluster.create(kube, plan, progress=info)
    if not wait:
        _next_steps(name, plan.namespace)
        return
    started = time.monotonic()
    last_line = [""]
    try:
        with Live(console=err, refresh_per_second=2, transient=False) as live:

            def tick(status: object) -> None:
                live.update(kv.progress_view(name, status, started))  # type: ignore[arg-type]
                if not err.is_terminal:  # logs and CI: one line per change
                    line = f"{status.phase} {status.ready} pods ready"  # type: ignore[attr-defined]
                    if line != last_line[0]:
                        info(line)
                        last_line[0] = line

            status = cluster.wait_running(kube, plan, timeout=timeout, tick=tick)
    except cluster.RefusedError as exc:
        # the operator refused it (or none runs): leave nothing behind
        found = cluster.find_or_none(kube, name, plan.namespace)
        if found is not None:
            cluster.delete(kube, found, wait=True, timeout=60)
        raise LaunchError(f"{exc}; {name} was deleted again") from exc
    took = time.monotonic() - started
    info(f"{name} is running: {status.ready} pods, {status.agents} agents ({took:.0f}s)")
    _next_steps(name, plan.namespace)
    result(name)


def _next_steps(name: str, namespace: str) -> None:
    ns = f" -n {namespace}"
    info(f"  surreal-kube status {name}{ns}   surreal-kube logs {name} learner -f{ns}")
    info(f"  surreal-kube tb {name}{ns}       surreal-kube delete {name} --wait{ns}")


def resolve_images(
    exp: Experiment,
    profile: object,
    chosen: dict[str, str],
    *,
    build: bool,
    push: bool,
    check: bool,
) -> dict[str, str]:
    """Exact image references for the images the experiment runs (pre-flight: they exist).

    `--image key=REF` wins; prebuilt images are used as they are; builds get their content-hash
    tag, built with --build, else checked in the engine (or the registry with a profile registry)
    when one is reachable.
    """
    from surreal_kube.launch.kube import images as planner
    from surreal_kube.launch.kube.render import used_image_keys

    keys = [k for k in used_image_keys(exp) if k not in chosen]
    unknown = sorted(set(chosen) - set(exp.spec.images))
    if unknown:
        raise SpecError(
            f"--image {unknown[0]}=...: no such key in spec.images "
            f"(keys: {', '.join(sorted(exp.spec.images))})"
        )
    registry = getattr(profile, "registry", None)
    refs = dict(chosen)
    if not keys:
        return refs
    offline = planner.plan_offline(exp, keys=keys, registry=registry)
    if all(p.status == "prebuilt" for p in offline):
        return refs | planner.references(offline)
    if not (build or check):
        return refs | planner.references(offline)
    try:
        client = planner.docker_client()
    except LaunchError as exc:
        if build:
            raise
        info(f"warning: images not checked ({exc})")
        return refs | planner.references(offline)
    plans = planner.plan_images(exp, client=client, keys=keys, registry=registry, push=push)
    if build:
        plans = planner.build_images(plans, client, push=push, progress=info)
    missing = [p for p in plans if p.status == "missing"]
    if missing:
        where = "the registry" if push else "the container engine"
        raise LaunchError(
            f"image {missing[0].reference} (spec.images.{missing[0].key}) is not in {where}: "
            f"build it with `surreal-kube build {exp.metadata.name}` or add --build"
        )
    return refs | planner.references(plans)
