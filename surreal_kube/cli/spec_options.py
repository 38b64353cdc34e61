"""The spec flags every verb that takes an experiment shares, and how they become an Experiment.

Layering (later wins): built-in defaults -> `-f` files -> these flags -> `--set`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.experiment.spec import Experiment

Name = Annotated[str, typer.Argument(help="Experiment name: a DNS-1035 label, e.g. exp-ppo-ant.")]
SpecFiles = Annotated[
    list[Path] | None,
    typer.Option("--file", "-f", help="Spec file(s) (YAML); later files win.", show_default=False),
]
Algorithm = Annotated[
    str | None, typer.Option("--algorithm", "-a", help="ppo or ddpg.", show_default=False)
]
Env = Annotated[
    str | None,
    typer.Option("--env", "-e", help="Environment id, e.g. gym:Ant-v5.", show_default=False),
]
NumAgents = Annotated[
    int | None, typer.Option("--num-agents", help="Number of agents.", show_default=False)
]
NumEvals = Annotated[
    int | None, typer.Option("--num-evals", help="Number of eval processes.", show_default=False)
]
AgentBatch = Annotated[
    int | None,
    typer.Option(
        "--agent-batch",
        help="Agents per process (pod); must divide --num-agents.",
        show_default=False,
    ),
]
MaxEnvSteps = Annotated[
    int | None,
    typer.Option(
        "--max-env-steps", help="Stop after this many env steps in total.", show_default=False
    ),
]
MaxTime = Annotated[
    float | None,
    typer.Option(
        "--max-time", help="Stop after this many seconds of wall time.", show_default=False
    ),
]
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        help="Override any field: spec.agents.count=4 (repeatable).",
        show_default=False,
    ),
]


def resolve_from_cli(
    name: str,
    files: list[Path] | None,
    algorithm: str | None,
    env: str | None,
    num_agents: int | None,
    num_evals: int | None,
    agent_batch: int | None,
    sets: list[str] | None,
    max_env_steps: int | None = None,
    max_time: float | None = None,
) -> Experiment:
    """Resolve the experiment the flags describe (raises SpecError on bad input)."""
    flags = {
        "algorithm.name": algorithm,
        "env.id": env,
        "agents.count": num_agents,
        "evals.count": num_evals,
        "agents.batch": agent_batch,
        "session.maxEnvSteps": max_env_steps,
        "session.maxTimeSeconds": max_time,
    }
    return resolve_experiment(name, spec_files=files or (), flags=flags, sets=sets or ())


Root = Annotated[
    Path | None,
    typer.Option(
        "--root",
        help="Folder of local experiments (default $SURREAL_KUBE_ROOT or ~/.surreal-kube).",
        show_default=False,
    ),
]
Local = Annotated[
    bool, typer.Option("--local", help="Run every component as a process on this machine.")
]
