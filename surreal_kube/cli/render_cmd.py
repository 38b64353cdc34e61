"""`surreal-kube render`: print the Kubernetes objects of an experiment, touching no cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import Output, info, names, result
from surreal_kube.errors import LaunchError, SpecError

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
Profile = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        metavar="FILE",
        help="Cluster profile (YAML: node pools, registry, experiment volume, pull secrets); "
        "placement is checked against its pools. Through the operator it is written into the "
        "Experiment (spec.profile); without it the operator's own profile applies.",
        show_default=False,
    ),
]
Images = Annotated[
    list[str] | None,
    typer.Option(
        "--image",
        metavar="KEY=REF",
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
    typer.Option(
        "--context",
        metavar="CONTEXT",
        help="Kubeconfig context for --discover.",
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
    max_env_steps: so.MaxEnvSteps = None,
    max_time: so.MaxTime = None,
    sets: so.Sets = None,
    output: Output = None,
    namespace: Namespace = None,
    profile: Profile = None,
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
    plan = planned(exp, namespace, profile=cluster, images=chosen)
    print_objects(plan.objects, output)


def print_objects(objects: list[dict[str, Any]], output: str | None) -> None:
    """Objects as YAML (the default), JSON or kind/name lines."""
    from surreal_kube.launch.kube.render.objects import dump_objects

    if output == "name":
        names([_kind_name(o) for o in objects])
        return
    result(dump_objects(objects, output or "yaml"))


def _kind_name(obj: dict[str, Any]) -> str:
    """kubectl's -o name: `configmap/exp`, `statefulset.apps/exp-agents`."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = str(obj.get("kind", "")).lower()
    return f"{kind}{'.' + group if group else ''}/{obj.get('metadata', {}).get('name', '')}"


def planned(
    exp: Any,
    namespace: str | None,
    *,
    profile: Any,
    images: dict[str, str],
) -> Any:
    """The plan `create` would apply (`launch/kube/plan.py`), without a cluster.

    `render` and `create --dry-run=client` both print its objects, so they never differ, and
    they are the objects the operator renders for the same spec and profile.
    """
    from surreal_kube.launch.kube.plan import make_plan

    ns = namespace or exp.metadata.namespace or "default"
    return make_plan(
        exp,
        ns,
        profile=profile,
        images=image_chooser(profile, images, build=False, push=False, check=False),
    )


def image_chooser(
    profile: object, chosen: dict[str, str], *, build: bool, push: bool, check: bool
) -> Any:
    """The image stage of the CLI's plan: `resolve_images` for the keys the plan runs."""

    def choose(exp: Any, keys: list[str]) -> dict[str, str]:
        return resolve_images(exp, profile, chosen, build=build, push=push, check=check, used=keys)

    return choose


def resolve_images(
    exp: Any,
    profile: object,
    chosen: dict[str, str],
    *,
    build: bool,
    push: bool,
    check: bool,
    used: list[str] | None = None,
) -> dict[str, str]:
    """Exact image references for the images the experiment runs (pre-flight: they exist).

    `--image key=REF` wins; prebuilt images are used as they are; builds get their content-hash
    tag, built with --build, else checked in the engine (or the registry with a profile registry)
    when one is reachable. used: the keys the experiment runs, when its plan knows them already.
    """
    from surreal_kube.launch.kube.images import engine, planner, wheelhouse

    if used is None:
        from surreal_kube.launch.kube.render.objects import used_image_keys

        used = used_image_keys(exp)
    keys = [k for k in used if k not in chosen]
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
        client = engine.docker_client()
    except LaunchError as exc:
        if build:
            raise
        info(f"warning: images not checked ({exc})")
        return refs | planner.references(offline)
    plans = engine.plan_images(exp, client=client, keys=keys, registry=registry, push=push)
    if build:
        plans = engine.build_images(
            plans, client, push=push, progress=info, wheelhouse=wheelhouse.default_wheelhouse()
        )
    missing = [p for p in plans if p.status == "missing"]
    if missing:
        where = "the registry" if push else "the container engine"
        raise LaunchError(
            f"image {missing[0].reference} (spec.images.{missing[0].key}) is not in {where}: "
            f"build it with `surreal-kube build {exp.metadata.name}` or add --build"
        )
    return refs | planner.references(plans)
