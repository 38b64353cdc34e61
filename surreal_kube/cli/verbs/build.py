"""`surreal-kube build`: build (and push) the images an experiment runs that do not exist yet.

Run in a user's project folder, it builds the project's image on top of the runtime image
(`launch/kube/images/planner.py`, `user_project`), the image `create` and `render` run in the
same folder then name: one content hash, no flag to repeat. The registry and the platform come
from the same place for every verb (the profile's `registry`, else $SURREAL_KUBE_REGISTRY;
--platform, else $SURREAL_KUBE_PLATFORM, else linux/amd64).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import info, result
from surreal_kube.errors import SpecError

if TYPE_CHECKING:
    from surreal_kube.launch.kube.images.planner import ImagePlan


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
    profile: kv.Profile = None,
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
            help="Dockerfile build argument NAME=VALUE (repeatable): given to, and part of the "
            "tag of, each image whose Dockerfile declares it; create and render, which take "
            "none, then need --image KEY=REF.",
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
    wheelhouse: Annotated[
        Path | None,
        typer.Option(
            "--wheelhouse",
            help="Folder of downloaded wheels reused by every build (default: "
            "$SURREAL_KUBE_WHEELHOUSE or ~/.cache/surreal-kube/wheels).",
            show_default=False,
        ),
    ] = None,
    no_wheelhouse: Annotated[
        bool,
        typer.Option("--no-wheelhouse", help="Let pip inside the build download from its index."),
    ] = False,
    load: Annotated[
        bool,
        typer.Option("--load", help="Load the images into a node's containerd (like `kind load`)."),
    ] = False,
    containerd_address: Annotated[
        str,
        typer.Option(
            "--containerd-address",
            envvar="CONTAINERD_ADDRESS",
            help="The node's containerd socket, for --load.",
        ),
    ] = "/run/containerd/containerd.sock",
    ctr: Annotated[
        str,
        typer.Option(
            "--ctr", envvar="SURREAL_KUBE_CTR", help="containerd's `ctr` command, for --load."
        ),
    ] = "ctr",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show what exists and what would be built.")
    ] = False,
    context_dir: Annotated[
        Path | None,
        typer.Option(
            "--context-dir",
            help="Folder the spec's Dockerfile and context paths are relative to, and where a "
            "project of yours is looked for (default: .).",
            show_default=False,
        ),
    ] = None,
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            envvar="SURREAL_KUBE_PLATFORM",
            help="Platform to build for, part of the tag (default: linux/amd64; set "
            "SURREAL_KUBE_PLATFORM for create and render to agree).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Build the experiment's missing images, tagged by the content hash of Dockerfile + context.

    An unchanged image keeps its tag and is not rebuilt; prebuilt images are used as they are.

    In a folder with your project (a pyproject.toml, or a requirements.txt, and your package),
    the images are your project on top of surreal-kube's runtime image: your requirements and
    package installed, so that `--env gym:mypkg.envs:MyEnv-v0` runs in the pods. `create` and
    `render` from the same folder use that image.

    Prints one line per image: key, exact reference, status (a project's runtime image as
    `<key>-runtime`).

    The packages pinned beside a Dockerfile (`runtime-cpu.requirements.txt`) come from a
    wheelhouse on this machine, downloaded once by this machine's pip. The CPU image is also
    tagged `<repository>:<version>`, the operator image the Helm chart names.

    Examples:

      surreal-kube build exp-ppo-ant

      surreal-kube build exp-ppo-ant --load --containerd-address /run/containerd/containerd.sock

      surreal-kube build exp-ppo-ant --push --profile gke.yaml

      cd ~/my-project && surreal-kube build exp-mine --env gym:mypkg.envs:MyEnv-v0
    """
    from surreal_kube.launch.kube.images import engine as image_engine
    from surreal_kube.launch.kube.images import load as image_load
    from surreal_kube.launch.kube.images import planner
    from surreal_kube.launch.kube.images import wheelhouse as wheelhouses
    from surreal_kube.launch.kube.profile import load_profile
    from surreal_kube.launch.kube.render.objects import used_image_keys

    exp = so.resolve_from_cli(name, files, algorithm, env, num_agents, num_evals, agent_batch, sets)
    cluster = load_profile(profile) if profile is not None else None
    registry = cluster.registry if cluster else None  # None: the planner's default_registry()
    if push and kind:
        raise SpecError("--push and --kind-load exclude each other: push to a registry or load")
    if load and (push or kind):
        other = "--push" if push else "--kind-load"
        raise SpecError(f"--load and {other} exclude each other: load into one place")
    if wheelhouse is not None and no_wheelhouse:
        raise SpecError("--wheelhouse and --no-wheelhouse exclude each other")
    if load and not dry_run:
        image_load.check_containerd(containerd_address, ctr)  # before a long build, not after
    client = image_engine.docker_client(engine)
    plans = image_engine.plan_images(
        exp,
        client=client,
        keys=used_image_keys(exp),
        registry=registry,
        push=push,
        base_dir=context_dir,
        build_args=parse_build_args(build_args),
        platform=platform,
    )
    if not dry_run:
        house = None if no_wheelhouse else (wheelhouse or wheelhouses.default_wheelhouse())
        plans = image_engine.build_images(plans, client, push=push, progress=info, wheelhouse=house)
        plans = [*plans, *_operator_image(plans, client, push=push)]
        if kind:
            plans = image_load.load_into_kind(plans, kind, progress=info)
        if load:
            plans = image_load.load_into_containerd(
                plans, client, address=containerd_address, ctr=ctr, progress=info
            )
        if not push and not kind and registry is None and planner.default_registry() is None:
            info(
                "note: no registry (profile or SURREAL_KUBE_REGISTRY): the images exist in this "
                "engine only"
            )
    rows = [(p.key, p.reference, p.status) for p in plans]
    rows += [(f"{p.key}-runtime", p.base.reference, p.base.status) for p in plans if p.base]
    result("".join(f"{key}\t{ref}\t{status}\n" for key, ref, status in rows))


def _operator_image(plans: list[ImagePlan], client: Any, *, push: bool) -> list[ImagePlan]:
    """The CPU image tagged with this version (the chart's default operator image), if built."""
    from dataclasses import replace
    from importlib.metadata import version

    from surreal_kube.launch.kube.images import engine as image_engine

    cpu = next((p for p in plans if p.key == "cpu" and p.status != "prebuilt"), None)
    if cpu is not None and cpu.base is not None:
        cpu = cpu.base  # a user project's image: the operator runs surreal-kube's own
    if cpu is None or not image_engine.exists_locally(client, cpu.reference):
        return []  # prebuilt, or only in the registry: nothing here to tag
    tagged = image_engine.release_tag(cpu, client, version("surreal-kube"), info)
    if tagged.status == "kept":  # an earlier build holds the version tag: it is not moved
        return [tagged]
    tagged = replace(tagged, status=cpu.status)
    if push:
        image_engine.push_one(tagged, client, info)
        tagged = replace(tagged, status="pushed")
    return [tagged]
