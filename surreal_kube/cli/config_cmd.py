"""`surreal-kube config`: print the fully resolved experiment."""

from __future__ import annotations

from typing import Annotated

import typer

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import result
from surreal_kube.experiment.resolve import dump_json, dump_yaml


def config(
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
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json.")] = "yaml",
) -> None:
    """Print the fully resolved experiment (defaults, files, flags and --set applied).

    Feeding the output back with -f reproduces it exactly.

    Examples:

      surreal-kube config exp-ppo-ant --algorithm ppo --env gym:Ant-v5 -o yaml

      surreal-kube config exp-ddpg -a ddpg --set replay.shards=2 -o json
    """
    if output not in ("yaml", "json"):
        raise typer.BadParameter(f"must be yaml or json, got {output!r}", param_hint="--output")
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
    result(dump_yaml(exp) if output == "yaml" else dump_json(exp))
