"""`surreal-kube build`: build (and push) the images an experiment runs that do not exist yet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import info, result
from surreal_kube.cli.render_cmd import Profile
from surreal_kube.errors import SpecError


def parse_build_args(pairs: list[str] | None) -> dict[str, str]:
    """`["PYTHON_IMAGE=python:3.11-slim"]` -> {"PYTHON_IMAGE": "python:3.11-slim"}."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--build-arg {pair!r}: expected NAME=VALUE")
        out[key.strip()] = value
    return out


def build(
    name: so.Name,
    files: so.SpecFiles = None,
    algorithm: so.Algorithm = None,
    env: so.Env = None,
    num_agents: so.NumAgents = None,
    num_evals: so.NumEvals = None,
    agent_batch: so.AgentBatch = None,
    sets: so.Sets = None,
    push: Annotated[
        bool, typer.Option("--push", help="Push to the profile's registry (and check it there).")
    ] = False,
    profile: Profile = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind-load",
            help="Load the images into the nodes of this kind cluster instead of pushing.",
            show_default=False,
        ),
    ] = None,
    build_args: Annotated[
        list[str] | None,
        typer.Option(
            "--build-arg",
            help="Dockerfile build argument NAME=VALUE (repeatable; part of the tag).",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Docker API URL (default: DOCKER_HOST), e.g. unix:///run/podman/podman.sock.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show what exists and what would be built.")
    ] = False,
    context_dir: Annotated[
        Path | None,
        typer.Option(
            "--context-dir",
            help="Folder the spec's Dockerfile and context paths are relative to (default: .).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Build the experiment's missing images, tagged by the content hash of Dockerfile + context.

    An unchanged image keeps its tag and is not rebuilt; prebuilt images are used as they are.

    Prints one line per image: key, exact reference, status.

    Examples:

      surreal-kube build exp-ppo-ant

      surreal-kube build exp-ppo-ant --push --profile gke.yaml
    """
    from surreal_kube.launch.kube import images as planner
    from surreal_kube.launch.kube.profile import load_profile
    from surreal_kube.launch.kube.render import used_image_keys

    exp = so.resolve_from_cli(name, files, algorithm, env, num_agents, num_evals, agent_batch, sets)
    cluster = load_profile(profile) if profile is not None else None
    registry = cluster.registry if cluster else None
    if push and kind:
        raise SpecError("--push and --kind-load exclude each other: push to a registry or load")
    client = planner.docker_client(engine)
    plans = planner.plan_images(
        exp,
        client=client,
        keys=used_image_keys(exp),
        registry=registry,
        push=push,
        base_dir=context_dir,
        build_args=parse_build_args(build_args),
    )
    if not dry_run:
        plans = planner.build_images(plans, client, push=push, progress=info)
        if kind:
            plans = planner.load_into_kind(plans, kind, progress=info)
        if not push and not kind and registry is None:
            info("note: no registry in the profile: the images exist in this engine only")
    result("".join(f"{p.key}\t{p.reference}\t{p.status}\n" for p in plans))
