"""`surreal-kube topology`: the process graph as a table."""

from __future__ import annotations

from typing import Any

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import Output, info, names, structured, table


def topology(
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
    output: Output = None,
) -> None:
    """Show every process of the experiment: its group, role, agent ids, binds and connects.

    In a pipe the table is plain columns, one process per line, never wrapped.

    Examples:

    \b
      surreal-kube topology exp-ppo-ant --num-agents 8 --agent-batch 4
      surreal-kube topology exp-ppo-ant -o yaml
      surreal-kube topology exp-ppo-ant -o name | grep agents
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
    topo = exp.topology
    if output == "name":
        names([p.name for p in topo.processes])
        return
    if output:
        rows: list[dict[str, Any]] = [
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
        structured(rows, output)
        return
    info(f"topology of {exp.metadata.name}: {len(topo.processes)} processes")
    if exp.spec.agents.batch is None and exp.spec.agents.count > 1:
        from surreal_kube.launch.local.backend import available_cores, pack_agents

        cores = available_cores()
        packed = pack_agents(exp.spec.agents.count, cores)
        if packed > 1:
            info(
                f"agents.batch unset: one agent a pod on Kubernetes; `create --local` runs "
                f"{packed} agents a process on this machine ({cores} cores)"
            )
    table(
        ["PROCESS", "GROUP", "ROLE", "AGENTS", "BINDS", "CONNECTS"],
        [
            [
                p.name,
                p.group,
                p.role,
                _ranges(p.agent_ids) or "-",
                ",".join(p.binds) or "-",
                ",".join(p.connects) or "-",
            ]
            for p in topo.processes
        ],
        wrap=("BINDS", "CONNECTS"),
    )


def _ranges(ids: tuple[int, ...]) -> str:
    if not ids:
        return ""
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
