"""`surreal-kube create`: resolve an experiment and start it on a backend."""

from __future__ import annotations

from typing import Annotated

import typer

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import abort, result
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
    local: Annotated[
        bool, typer.Option("--local", help="Run every component as a process on this machine.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would run; start nothing.")
    ] = False,
) -> None:
    """Create and start an experiment.

    Examples:

      surreal-kube create exp-ppo-ant --local --algorithm ppo --env gym:Ant-v5

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
    if dry_run:
        result(describe_plan(exp, local=local))
        return
    if local:
        abort("the local backend is not available yet in this build", 1)
    abort("the Kubernetes backend is not available yet in this build; use --local or --dry-run", 1)


def describe_plan(exp: Experiment, *, local: bool) -> str:
    """What `create` would start: the resolved spec, then one line per process."""
    topo = experiment_topology(exp)
    backend = "local processes" if local else "Kubernetes"
    lines = [dump_yaml(exp).rstrip("\n"), "---", f"# would start on {backend}:"]
    for p in topo.processes:
        ids = f" agents {list(p.agent_ids)}" if p.agent_ids else ""
        lines.append(f"# {p.name}: surreal-kube-role {p.role} --id {p.index}{ids}")
    return "\n".join(lines) + "\n"
