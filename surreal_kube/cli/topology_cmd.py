"""`surreal-kube topology`: the process graph as a table."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import out, result
from surreal_kube.experiment.resolve import experiment_topology


def topology(
    name: so.Name,
    files: so.SpecFiles = None,
    algorithm: so.Algorithm = None,
    env: so.Env = None,
    num_agents: so.NumAgents = None,
    num_evals: so.NumEvals = None,
    agent_batch: so.AgentBatch = None,
    sets: so.Sets = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
) -> None:
    """Show every process of the experiment: its group, role, agent ids, binds and connects.

    Examples:

      surreal-kube topology exp-ppo-ant --num-agents 8 --agent-batch 4

      surreal-kube topology exp-ppo-ant -o json
    """
    if output not in ("table", "json"):
        raise typer.BadParameter(f"must be table or json, got {output!r}", param_hint="--output")
    exp = so.resolve_from_cli(name, files, algorithm, env, num_agents, num_evals, agent_batch, sets)
    topo = experiment_topology(exp)
    if output == "json":
        rows = [
            {
                "process": p.name,
                "group": p.group,
                "role": p.role,
                "index": p.index,
                "agentIds": list(p.agent_ids),
                "binds": list(p.binds),
                "connects": list(p.connects),
            }
            for p in topo.processes
        ]
        result(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(title=f"topology of {exp.metadata.name}")
    for col in ("process", "group", "role", "agents"):
        table.add_column(col, no_wrap=True)
    for col in ("binds", "connects"):
        table.add_column(col, overflow="fold")
    for p in topo.processes:
        ids = _ranges(p.agent_ids)
        table.add_row(p.name, p.group, p.role, ids, ", ".join(p.binds), ", ".join(p.connects))
    out.print(table)


def _ranges(ids: tuple[int, ...]) -> str:
    if not ids:
        return ""
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
