"""The CLI's image stage: `--image KEY=REF` and the exact images an experiment runs.

`render` and `create` choose images here, the one way (`--image` wins, prebuilt images as they
are, builds by their content-hash tag), so a dry run names the images a real create applies.
Only typer is imported at module level; the image planner and the container engine are
imported when images are resolved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from surreal_kube.cli.output import info
from surreal_kube.errors import LaunchError, SpecError

Images = Annotated[
    list[str] | None,
    typer.Option(
        "--image",
        metavar="KEY=REF",
        help="Use this exact image for a key of spec.images: cpu=REF or gpu=REF (repeatable).",
        show_default=False,
    ),
]


def parse_images(pairs: list[str] | None) -> dict[str, str]:
    """`["cpu=repo:tag"]` -> {"cpu": "repo:tag"} (SpecError on a malformed pair)."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, ref = pair.partition("=")
        if not sep or not key.strip() or not ref.strip():
            raise SpecError(f"--image {pair!r}: expected KEY=REF, e.g. cpu=registry/runtime:1a2b")
        out[key.strip()] = ref.strip()
    return out


def registry_of(profile: object, context: str | None, kubeconfig: Path | None) -> str:
    """The registry a verb names images in: the profile's, else $SURREAL_KUBE_REGISTRY, else
    the settings file's for the verb's kube context (`surreal-kube registry`). "" when there is
    none: resolved, so the planner does not look again (for the current context)."""
    from surreal_kube.launch.kube.settings import registry_for

    return getattr(profile, "registry", None) or registry_for(context, kubeconfig) or ""


def image_chooser(
    registry: str | None, chosen: dict[str, str], *, build: bool, push: bool, check: bool
) -> Any:
    """The image stage of the CLI's plan: `resolve_images` for the keys the plan runs."""

    def choose(exp: Any, keys: list[str]) -> dict[str, str]:
        return resolve_images(exp, registry, chosen, build=build, push=push, check=check, used=keys)

    return choose


def resolve_images(
    exp: Any,
    registry: str | None,
    chosen: dict[str, str],
    *,
    build: bool,
    push: bool,
    check: bool,
    used: list[str] | None = None,
) -> dict[str, str]:
    """Exact image references for the images the experiment runs (pre-flight: they exist).

    `--image key=REF` wins; prebuilt images are used as they are; builds get their content-hash
    tag, built with --build, else checked where the cluster will pull them: in `registry`
    (`registry_of`; "" for none) when there is one, else in this engine, whose images reach the
    nodes by `build --load`. used: the keys the experiment runs, when its plan knows them.
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
    refs = dict(chosen)
    if not keys:
        return refs
    offline = planner.plan_offline(exp, keys=keys, registry=registry)
    if all(p.status == "prebuilt" for p in offline):
        return refs | planner.references(offline)
    if not (build or check):
        return refs | planner.references(offline)
    if registry and build and not push:
        raise SpecError(
            f"--build names images in registry {registry}, where the cluster pulls them: add "
            "--push, or build without a registry and load the images into the nodes"
        )
    if registry and not build:
        return refs | in_registry(exp, offline)
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


def in_registry(exp: Any, plans: list[Any]) -> dict[str, str]:
    """The references of `plans`, each built one asked for in its registry, where the cluster
    pulls it (not in this engine, which the cluster never sees); LaunchError if it is missing."""
    from surreal_kube.launch.kube.images import planner
    from surreal_kube.launch.kube.images.remote import manifest_exists

    for plan in plans:
        if plan.status == "prebuilt":
            continue
        answer = manifest_exists(plan.reference)
        if answer.status == "missing":
            raise LaunchError(
                f"image {plan.reference} (spec.images.{plan.key}) is not in its registry, "
                f"where the cluster pulls it: `surreal-kube build {exp.metadata.name} --push` "
                "builds and pushes it, or add --build --push"
            )
        if answer.status == "unknown":
            info(f"warning: {plan.reference} not checked in its registry: {answer.reason}")
    return planner.references(plans)
