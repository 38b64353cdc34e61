"""`surreal-kube render`: print the Kubernetes objects of an experiment, touching no cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.image_options import Images, parse_images, registry_of
from surreal_kube.cli.output import Output
from surreal_kube.cli.plan_view import planned, print_objects
from surreal_kube.errors import LaunchError

Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        metavar="NAMESPACE",
        help="Namespace of the objects (default: metadata.namespace, else 'default').",
        show_default=False,
    ),
]
Discover = Annotated[
    bool,
    typer.Option(
        "--discover",
        help="Read the node pools from the nodes of the current kube context (other settings "
        "from --profile) and check placement against them.",
    ),
]
Context = Annotated[
    str | None,
    typer.Option(
        "--context",
        metavar="CONTEXT",
        help="Kubeconfig context for --discover, and whose registry names built images "
        "(`surreal-kube registry`; default: the current one).",
        show_default=False,
    ),
]


def cluster_profile(profile: Path | None, discover: bool, context: str | None) -> Any:
    """The profile file, with its pools replaced by the live cluster's when `discover`."""
    from surreal_kube.launch.kube.profile import load_profile

    base = load_profile(profile) if profile is not None else None
    if not discover:
        return base
    from surreal_kube.launch.kube.api.client import Kube, KubeError
    from surreal_kube.launch.kube.placement.pools import discover_pools

    try:
        kube = Kube(context=context)
    except KubeError as exc:
        raise LaunchError(f"--discover: {exc}") from exc
    with kube:
        kube.raw("GET", "/version", what="reach the API server")  # unreachable: say so first
        return discover_pools(kube, base)


def render(
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
    namespace: Namespace = None,
    profile: kv.Profile = None,
    discover: Discover = False,
    context: Context = None,
    images: Images = None,
) -> None:
    """Print the experiment's Kubernetes objects (ConfigMap, volume, Services, workloads).

    Touches no cluster (unless --discover). Built images get content-hash tags computed from the
    Dockerfiles under the current folder, and the spec in the ConfigMap names the exact images,
    as `create` applies it. The ConfigMap is the root: ownerReferences need its uid, so `create`
    sets them on apply. Output is YAML unless -o says otherwise; -o name lists kind/name.

    Examples:

    \b
      surreal-kube render exp-ppo-ant --num-agents 8 --agent-batch 4 -n rl
      surreal-kube render exp-ppo-ant --profile gke.yaml -o json
      surreal-kube render exp-ppo-ant --discover --set resources.learner.gpu=1
      surreal-kube config exp -o yaml | surreal-kube render exp -f -
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
    chosen = parse_images(images)
    cluster = cluster_profile(profile, discover, context)
    registry = registry_of(cluster, context, None)
    plan = planned(exp, namespace, profile=cluster, images=chosen, registry=registry)
    print_objects(plan.objects, output)
