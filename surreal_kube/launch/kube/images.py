"""The image planner: which images an experiment runs, which must be built, and building them.

`spec.images` names, per key ("cpu" for CPU pods, "gpu" for pods with GPUs), either a prebuilt
image (used as is) or a build. A build is tagged by the content hash of its Dockerfile and context
(`buildcontext.content_hash`): `<registry>/<repository>:<hash16>`. The same files always give
the same tag, so an unchanged image is never rebuilt and the rendered objects name it exactly
(`imagePullPolicy: IfNotPresent` never serves a stale image: a new content is a new tag).

    plans = plan_images(exp, client=docker_client())        # what exists, what is missing
    build_images(plans, client, push=True)                  # build (and push) the missing ones
    render_experiment(exp, ns, images=references(plans))    # exact tags in the pods

The engine is anything speaking the Docker API (Docker, or `podman system service`), reached
through the `docker` SDK: DOCKER_HOST or the default socket.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from surreal_kube.errors import LaunchError
from surreal_kube.experiment.spec import Experiment, ImageBuild
from surreal_kube.launch.kube import buildcontext

TAG_LENGTH = 16
HASH_LABEL = "surreal.ai/content-hash"
Status = Literal["prebuilt", "present", "missing", "built", "pushed", "loaded"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class ImagePlan:
    """One image of an experiment and what has to happen to it."""

    key: str
    """The key in `spec.images` ("cpu", "gpu")."""
    reference: str
    """Exact reference the pods use."""
    status: Status
    build: ImageBuild | None = None
    dockerfile: Path | None = None
    contexts: tuple[Path, ...] = ()
    content_hash: str | None = None
    build_args: tuple[tuple[str, str], ...] = ()

    @property
    def repository(self) -> str:
        """The reference without its tag."""
        return split_reference(self.reference)[0]

    @property
    def tag(self) -> str:
        """The reference's tag."""
        return split_reference(self.reference)[1]


def split_reference(reference: str) -> tuple[str, str]:
    """`host:5000/a/b:tag` -> (`host:5000/a/b`, `tag`); no tag -> `latest` (Docker's rule)."""
    name, _, digest = reference.partition("@")
    if digest:
        return name, digest
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, "latest"


def tagged(repository: str, content_hash: str, registry: str | None) -> str:
    """`<registry>/<repository>:<hash prefix>`."""
    repo = f"{registry.rstrip('/')}/{repository}" if registry else repository
    return f"{repo}:{content_hash[:TAG_LENGTH]}"


def _resolve(base_dir: Path, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else base_dir / p


def plan_offline(
    exp: Experiment,
    *,
    keys: Iterable[str] | None = None,
    registry: str | None = None,
    base_dir: str | Path | None = None,
    build_args: Mapping[str, str] | None = None,
) -> list[ImagePlan]:
    """Plans with exact references, from the files alone (status `prebuilt` or `missing`).

    Paths in `spec.images.*.build` are relative to `base_dir` (default: the current directory).
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    args = tuple(sorted((build_args or {}).items()))
    plans = []
    for key in sorted(keys) if keys is not None else sorted(exp.spec.images):
        spec = exp.spec.images.get(key)
        if spec is None:
            raise LaunchError(f"spec.images.{key}: is not defined")
        if spec.image is not None:
            plans.append(ImagePlan(key, spec.image, "prebuilt"))
            continue
        assert spec.build is not None
        dockerfile = _resolve(base, spec.build.dockerfile)
        contexts = tuple(_resolve(base, c) for c in spec.build.context)
        try:
            digest = buildcontext.content_hash(dockerfile, contexts, dict(args))
        except LaunchError as exc:
            raise LaunchError(
                f"spec.images.{key}: cannot compute the image tag: {exc} (paths are relative to "
                f"{str(base)!r}); run from the project checkout, or name a prebuilt image "
                f"with --set spec.images.{key}.image=REF"
            ) from None
        ref = tagged(spec.build.repository, digest, registry)
        plans.append(ImagePlan(key, ref, "missing", spec.build, dockerfile, contexts, digest, args))
    return plans


def planned_references(
    exp: Experiment,
    *,
    keys: Iterable[str] | None = None,
    registry: str | None = None,
    base_dir: str | Path | None = None,
) -> dict[str, str]:
    """key -> exact reference, without asking any engine (what `render` prints)."""
    return references(plan_offline(exp, keys=keys, registry=registry, base_dir=base_dir))


def references(plans: Iterable[ImagePlan]) -> dict[str, str]:
    """key -> exact reference: the `images` argument of render_experiment."""
    return {p.key: p.reference for p in plans}


# ------------------------------------------------------------------------------------ engine


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


def exists_in_registry(client: Any, reference: str) -> bool:
    """True if the registry of `reference` serves it (asked through the engine)."""
    from docker.errors import APIError, NotFound

    try:
        client.images.get_registry_data(reference)
    except (NotFound, APIError):
        return False
    return True


def plan_images(
    exp: Experiment,
    *,
    client: Any,
    keys: Iterable[str] | None = None,
    registry: str | None = None,
    push: bool = False,
    base_dir: str | Path | None = None,
    build_args: Mapping[str, str] | None = None,
) -> list[ImagePlan]:
    """Plans with their status: `present` if the engine (or, when pushing, the registry) has the
    exact tag already, else `missing`; prebuilt images are used as they are."""
    if push and not registry:
        raise LaunchError(
            "--push needs a registry: set `registry:` in the cluster profile (--profile FILE)"
        )
    out = []
    for plan in plan_offline(
        exp, keys=keys, registry=registry, base_dir=base_dir, build_args=build_args
    ):
        if plan.status == "missing":
            have = (
                exists_in_registry(client, plan.reference)
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
) -> list[ImagePlan]:
    """Build every `missing` plan (and push it if `push`); returns the plans with new statuses."""
    say = progress or (lambda _line: None)
    out = []
    for plan in plans:
        if plan.status == "missing":
            if not (push and exists_locally(client, plan.reference)):
                build_one(plan, client, say)
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
    say(f"building {plan.reference} ({plan.dockerfile})")
    with tempfile.TemporaryFile() as tar:
        buildcontext.write_tar(plan.dockerfile, plan.contexts, tar)
        tar.seek(0)
        try:
            stream = client.api.build(
                fileobj=tar,
                custom_context=True,
                dockerfile=buildcontext.DOCKERFILE_IN_CONTEXT,
                tag=plan.reference,
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


def load_into_kind(
    plans: Sequence[ImagePlan], cluster: str, progress: Progress | None = None
) -> list[ImagePlan]:
    """Load built images into the nodes of a kind cluster instead of pushing them.

    Uses `kind load docker-image`, which reads from the Docker engine kind itself runs on.
    """
    say = progress or (lambda _line: None)
    kind = shutil.which("kind")
    if kind is None:
        raise LaunchError("loading images into kind needs the `kind` command on PATH")
    out = []
    for plan in plans:
        if plan.status in ("built", "present"):
            say(f"loading {plan.reference} into kind cluster {cluster}")
            done = subprocess.run(
                [kind, "load", "docker-image", plan.reference, "--name", cluster],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise LaunchError(
                    f"kind load of {plan.reference} failed: {done.stderr.strip() or done.stdout}"
                )
            plan = replace(plan, status="loaded")
        out.append(plan)
    return out
