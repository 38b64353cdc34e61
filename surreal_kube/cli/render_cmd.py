"""`surreal-kube render`: print the Kubernetes objects of an experiment, touching no cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import result
from surreal_kube.errors import LaunchError, SpecError

Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Namespace of the objects (default: metadata.namespace, else 'default').",
        show_default=False,
    ),
]
Profile = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        help="Cluster profile (YAML: node pools, registry, experiment volume); placement is "
        "checked against its pools.",
        show_default=False,
    ),
]
Images = Annotated[
    list[str] | None,
    typer.Option(
        "--image",
        help="Use this exact image for a key of spec.images: cpu=REF or gpu=REF (repeatable).",
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
    typer.Option("--context", help="kubeconfig context for --discover.", show_default=False),
]


def cluster_profile(profile: Path | None, discover: bool, context: str | None) -> Any:
    """The profile file, with its pools replaced by the live cluster's when `discover`."""
    from surreal_kube.launch.kube.profile import discover_profile, load_profile

    base = load_profile(profile) if profile is not None else None
    if not discover:
        return base
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        api = config.new_client_from_config(context=context)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        raise LaunchError(
            f"cannot load the Kubernetes configuration for --discover: {exc}"
        ) from exc
    with api:
        return discover_profile(api, base)


def parse_images(pairs: list[str] | None) -> dict[str, str]:
    """`["cpu=repo:tag"]` -> {"cpu": "repo:tag"} (SpecError on a malformed pair)."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, ref = pair.partition("=")
        if not sep or not key.strip() or not ref.strip():
            raise SpecError(f"--image {pair!r}: expected KEY=REF, e.g. cpu=registry/runtime:1a2b")
        out[key.strip()] = ref.strip()
    return out


def render(
    name: so.Name,
    files: so.SpecFiles = None,
    algorithm: so.Algorithm = None,
    env: so.Env = None,
    num_agents: so.NumAgents = None,
    num_evals: so.NumEvals = None,
    agent_batch: so.AgentBatch = None,
    sets: so.Sets = None,
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json.")] = "yaml",
    namespace: Namespace = None,
    profile: Profile = None,
    discover: Discover = False,
    context: Context = None,
    images: Images = None,
) -> None:
    """Print the experiment's Kubernetes objects (ConfigMap, volume, Services, workloads).

    Built images get content-hash tags computed from the Dockerfiles under the current folder.

    The ConfigMap is the root: ownerReferences need its uid, so `create` sets them on apply.

    Examples:

      surreal-kube render exp-ppo-ant --num-agents 8 --agent-batch 4 -n rl

      surreal-kube render exp-ppo-ant --profile gke.yaml -o json

      surreal-kube render exp-ppo-ant --discover --set resources.learner.gpu=1
    """
    if output not in ("yaml", "json"):
        raise typer.BadParameter(f"must be yaml or json, got {output!r}", param_hint="--output")
    from surreal_kube.launch.kube.render import dump_objects, render_experiment

    exp = so.resolve_from_cli(name, files, algorithm, env, num_agents, num_evals, agent_batch, sets)
    cluster = cluster_profile(profile, discover, context)
    chosen = parse_images(images)
    unknown = sorted(set(chosen) - set(exp.spec.images))
    if unknown:
        raise SpecError(
            f"--image {unknown[0]}=...: no such key in spec.images "
            f"(keys: {', '.join(sorted(exp.spec.images))})"
        )
    objects = render_experiment(
        exp,
        namespace or exp.metadata.namespace or "default",
        images=chosen,
        profile=cluster,
    )
    result(dump_objects(objects, output))
