"""`surreal-kube config`: print the fully resolved experiment."""

from __future__ import annotations

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import Output, names, result


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
    output: Output = None,
) -> None:
    """Print the fully resolved experiment (defaults, files, flags and --set applied).

    YAML unless -o says otherwise. Feeding the output back with -f reproduces it exactly.

    Examples:

    \b
      surreal-kube config exp-ppo-ant -a ppo -e gym:Ant-v5 -o yaml > exp.yaml
      surreal-kube config exp-ddpg -a ddpg --set replay.shards=2 -o json
      surreal-kube config exp-ppo-ant -f exp.yaml | surreal-kube topology x -f -
    """
    from surreal_kube.experiment.resolve import dump_json, dump_yaml

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
    if output == "name":
        names([exp.metadata.name])
        return
    result(dump_json(exp) if output == "json" else dump_yaml(exp))
