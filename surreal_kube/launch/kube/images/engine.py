"""Images in a container engine: what it (or the registry) already has, building, pushing.

The engine is anything speaking the Docker API (Docker, or `podman system service`), reached
through the `docker` SDK (imported only here, when a verb needs an engine): DOCKER_HOST or the
default socket. What to build comes from `planner.py`; a build with pinned requirements gets its
wheels from the host's wheelhouse (`wheelhouse.py`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from surreal_kube.errors import LaunchError
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.kube.images import buildcontext
from surreal_kube.launch.kube.images.planner import (
    HASH_LABEL,
    ImagePlan,
    Progress,
    default_registry,
    plan_offline,
    split_reference,
    tagged,
)
from surreal_kube.launch.kube.images.wheelhouse import (
    WHEELS_DOCKERFILE,
    WHEELS_REPOSITORY,
    fill_wheelhouse,
    requirements_of,
)


def docker_client(base_url: str | None = None, timeout: int = 600) -> Any:
    """A docker SDK client for DOCKER_HOST (or `base_url`); LaunchError if nothing answers."""
    import docker
    from docker.errors import DockerException

    try:
        client = (
            docker.DockerClient(base_url=base_url, timeout=timeout)
            if base_url
            else docker.from_env(timeout=timeout)
        )
        client.ping()
    except DockerException as exc:
        where = base_url or "DOCKER_HOST or the default socket"
        raise LaunchError(
            f"cannot reach a container engine at {where}: {exc}; start Docker, or run "
            "`podman system service --time=0 unix:///run/podman/podman.sock` and set "
            "DOCKER_HOST=unix:///run/podman/podman.sock"
        ) from exc
    return client


def exists_locally(client: Any, reference: str) -> bool:
    """True if the engine holds `reference`."""
    from docker.errors import ImageNotFound, NotFound

    try:
        client.images.get(reference)
    except (ImageNotFound, NotFound):
        return False
    return True


def exists_in_registry(reference: str) -> bool:
    """True if the registry of `reference` serves it (asked as a kubelet pulls: `remote`);
    an unknown answer is False, so that a push is never skipped on a guess."""
    from surreal_kube.launch.kube.images.remote import manifest_exists

    return manifest_exists(reference).status == "present"


def plan_images(
    exp: Experiment,
    *,
    client: Any,
    keys: Iterable[str] | None = None,
    registry: str | None = None,
    push: bool = False,
    base_dir: str | Path | None = None,
    build_args: Mapping[str, str] | None = None,
    platform: str | None = None,
    project: bool = True,
) -> list[ImagePlan]:
    """Plans with their status: `present` if the engine (or, when pushing, the registry) has the
    exact tag already, else `missing`; prebuilt images are used as they are. A user image's
    runtime image (`base`) is looked for in the engine: it is built there, under the user's."""
    registry = registry if registry is not None else default_registry()
    if push and not registry:
        raise LaunchError(
            "--push needs a registry: set `registry:` in the cluster profile (--profile FILE) "
            "or SURREAL_KUBE_REGISTRY"
        )
    out = []
    for plan in plan_offline(
        exp,
        keys=keys,
        registry=registry,
        base_dir=base_dir,
        build_args=build_args,
        platform=platform,
        project=project,
    ):
        if plan.base is not None and exists_locally(client, plan.base.reference):
            plan = replace(plan, base=replace(plan.base, status="present"))
        if plan.status == "missing":
            have = (
                exists_in_registry(plan.reference)
                if push
                else exists_locally(client, plan.reference)
            )
            if have:
                plan = replace(plan, status="present")
        out.append(plan)
    return out


def build_images(
    plans: Sequence[ImagePlan],
    client: Any,
    *,
    push: bool = False,
    progress: Progress | None = None,
    wheelhouse: Path | None = None,
) -> list[ImagePlan]:
    """Build every `missing` plan (and push it if `push`); returns the plans with new statuses.

    With a `wheelhouse`, a plan whose Dockerfile has pinned requirements beside it
    (`requirements_of`) installs them from wheels the host downloaded once (`with_wheels`), so
    no build downloads a package twice and none needs an index from inside the engine. A user
    image's missing runtime image is built first (and not pushed: the user's image holds it).
    """
    say = progress or (lambda _line: None)
    out = []
    for plan in plans:
        if plan.status == "missing":
            if not (push and exists_locally(client, plan.reference)):
                if plan.base is not None and plan.base.status == "missing":
                    build_one(with_wheels(plan.base, client, wheelhouse, say), client, say)
                    plan = replace(plan, base=replace(plan.base, status="built"))
                build_one(with_wheels(plan, client, wheelhouse, say), client, say)
            plan = replace(plan, status="built")
            if push:
                push_one(plan, client, say)
                plan = replace(plan, status="pushed")
        out.append(plan)
    return out


def build_one(plan: ImagePlan, client: Any, say: Progress) -> None:
    """Build one plan through the engine's build API, streaming its output to `say`."""
    from docker.errors import APIError

    assert plan.dockerfile is not None and plan.content_hash is not None
    say(f"building {plan.reference} ({plan.dockerfile}, {plan.platform})")
    with tempfile.TemporaryFile() as tar:
        buildcontext.write_tar(plan.dockerfile, plan.contexts, tar)
        tar.seek(0)
        try:
            stream = client.api.build(
                fileobj=tar,
                custom_context=True,
                dockerfile=buildcontext.DOCKERFILE_IN_CONTEXT,
                tag=plan.reference,
                platform=plan.platform,
                # RUN steps (apt-get) reach package mirrors through the host's network: no
                # bridge to set up in the engine, and nothing of it reaches the image.
                network_mode="host",
                rm=True,
                forcerm=True,
                pull=False,
                buildargs=dict(plan.build_args),
                labels={HASH_LABEL: plan.content_hash},
                decode=True,
            )
            last: list[str] = []
            for chunk in stream:
                if "error" in chunk or "errorDetail" in chunk:
                    detail = chunk.get("errorDetail", {}).get("message") or chunk.get("error")
                    tail = "".join(last[-10:]).strip()
                    raise LaunchError(
                        f"building {plan.reference} failed: {str(detail).strip()}"
                        + (f"\n{tail}" if tail else "")
                    )
                text = chunk.get("stream")
                if text:
                    last.append(text)
                    for line in text.splitlines():
                        if line.strip():
                            say(line)
        except APIError as exc:
            raise LaunchError(f"building {plan.reference} failed: {exc.explanation}") from exc
    if not exists_locally(client, plan.reference):
        raise LaunchError(f"building {plan.reference} finished but the engine does not have it")


def push_one(plan: ImagePlan, client: Any, say: Progress) -> None:
    """Push one image to its registry, raising LaunchError on the first error line."""
    from docker.errors import APIError

    repository, tag = split_reference(plan.reference)
    say(f"pushing {plan.reference}")
    try:
        for chunk in client.images.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk.get("error")
                raise LaunchError(f"pushing {plan.reference} failed: {detail}")
    except APIError as exc:
        raise LaunchError(f"pushing {plan.reference} failed: {exc.explanation}") from exc


def release_tag(
    plan: ImagePlan, client: Any, version: str, progress: Progress | None = None
) -> ImagePlan:
    """Tag a built (or present) image also as `<repository>:<version>`: the chart's default image.

    The Helm chart runs the operator from the CPU runtime image (it carries
    `surreal-kube-operator`) and names it by the chart's appVersion, so the image this build made
    is the one `helm install` runs. A version tag never moves: the chart pulls IfNotPresent, so
    nodes that pulled `:<version>` once keep it, and a re-tag would leave them on another build
    than the engine and the registry. When `<repository>:<version>` already names another image,
    it is left as it is (status "kept") and `progress` says how to pin this build instead (its
    content-hash tag, the pods' exact reference anyway).
    """
    from docker.errors import APIError, ImageNotFound, NotFound

    repository = plan.repository
    release = f"{repository}:{version}"
    try:
        current = client.images.get(release).id
    except (ImageNotFound, NotFound):
        current = None
    if current is not None and current != client.images.get(plan.reference).id:
        if progress:
            progress(
                f"kept {release}: it names an earlier build and version tags never move (nodes "
                f"keep what they pulled); run this build with --set image.tag="
                f"{split_reference(plan.reference)[1]} or a new version"
            )
        return ImagePlan("operator", release, "kept", content_hash=plan.content_hash)
    try:
        client.api.tag(plan.reference, repository, version, force=True)
    except APIError as exc:
        raise LaunchError(
            f"tagging {plan.reference} as {version} failed: {exc.explanation}"
        ) from exc
    return ImagePlan("operator", release, "built", content_hash=plan.content_hash)


def wheels_image(files: Sequence[Path], client: Any, progress: Progress | None = None) -> str:
    """An image holding `files` at its root, tagged by their content hash; built if missing."""
    say = progress or (lambda _line: None)
    if not files:
        raise LaunchError("no wheels to put in a wheels image")
    parent = files[0].parent
    with tempfile.TemporaryDirectory(prefix=".wheels-", dir=parent) as tmp:
        context = Path(tmp) / "wheels"
        context.mkdir()
        for f in files:
            try:
                os.link(f, context / f.name)  # same file system: no copy of gigabytes
            except OSError:
                shutil.copy2(f, context / f.name)
        dockerfile = Path(tmp) / "wheels.Dockerfile"
        dockerfile.write_text(WHEELS_DOCKERFILE)
        digest = buildcontext.content_hash(dockerfile, [context])
        ref = tagged(WHEELS_REPOSITORY, digest, None)
        if not exists_locally(client, ref):
            plan = ImagePlan("wheels", ref, "missing", None, dockerfile, (context,), digest)
            build_one(plan, client, say)
    return ref


def with_wheels(
    plan: ImagePlan, client: Any, wheelhouse: Path | None, progress: Progress | None = None
) -> ImagePlan:
    """`plan` with WHEELS_IMAGE set to its pinned wheels, when it has pins and a wheelhouse.

    WHEELS_IMAGE is a transport argument: the image's tag does not change with it.
    """
    if wheelhouse is None or plan.dockerfile is None:
        return plan
    if any(k == "WHEELS_IMAGE" for k, _ in plan.build_args):
        return plan  # the caller named one
    requirements = requirements_of(plan.dockerfile)
    if requirements is None:
        return plan
    files = fill_wheelhouse(requirements, wheelhouse.expanduser(), progress, plan.platform)
    ref = wheels_image(files, client, progress)
    return replace(plan, build_args=(*plan.build_args, ("WHEELS_IMAGE", ref)))
