"""`surreal-kube create`: resolve an experiment and start it on a backend."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.live import Live

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.local_view import RateMeter, render_state
from surreal_kube.cli.output import abort, err, info, result
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
) -> None:
    """Create and start an experiment.

    Examples:

      surreal-kube create exp-ppo-ant --local --algorithm ppo --env gym:Ant-v5 --max-time 600

      surreal-kube create exp-ppo-ant --local --detach --num-agents 4

      surreal-kube create exp-ppo-ant --local --resume --max-time 1200

      surreal-kube create exp-ppo-ant --dry-run --num-agents 8 --agent-batch 4
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
    if dry_run:
        result(describe_plan(exp, local=local))
        return
    if not local:
        abort("the Kubernetes backend is not available yet in this build; use --local", 1)
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
