"""The CLI's image stage: `--image KEY=REF` and the exact images an experiment runs.

`render` and `create` choose images here, the one way (`--image` wins, prebuilt images as they
are, builds by their content-hash tag), so a dry run names the images a real create applies.
Only typer is imported at module level; the image planner and the container engine are
imported when images are resolved.
"""

from __future__ import annotations

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
