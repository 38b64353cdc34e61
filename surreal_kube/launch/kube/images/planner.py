"""The image planner: which images an experiment runs, which must be built, and building them.

`spec.images` names, per key ("cpu" for CPU pods, "gpu" for pods with GPUs), either a prebuilt
image (used as is) or a build. A build is tagged by the content hash of its Dockerfile, context
and platform (`buildcontext.content_hash`): `<registry>/<repository>:<hash16>`. The same files
always give the same tag, so an unchanged image is never rebuilt and the rendered objects name it
exactly (`imagePullPolicy: IfNotPresent` never serves a stale image: a new content is a new tag).

Where the files are: the default builds name `@surreal-kube/...`, the folder the installed
`surreal_kube` package lives in (a checkout's root, or a site-packages): the Dockerfiles ship inside
the package (`surreal_kube/dockerfiles/`), so `render` and `build` work from a pip install anywhere.
Other paths are relative to the base folder (`--context-dir`, default: the current directory).

The user's project: when the base folder is a project of the user's (`user_project`: a
pyproject.toml whose project is not surreal-kube, or a requirements.txt), each image built from
our Dockerfiles gets the project on top (`user.Dockerfile`, FROM the exact runtime image), and the
pods run that image. Its tag hashes the project's files, the runtime's content hash and the
platform, so `build`, `render` and `create` run in the same folder agree on it with no flag.

One place for what every verb must agree on: the platform (`default_platform`: linux/amd64, or
$SURREAL_KUBE_PLATFORM; part of every tag) and the registry (the profile's `registry`, else
$SURREAL_KUBE_REGISTRY, else the settings file's for the kube context: `default_registry`), read
here by `build`, `render` and `create` alike.

    plans = plan_images(exp, client=docker_client())        # what exists, what is missing
    build_images(plans, client, push=True)                  # build (and push) the missing ones
    render_experiment(exp, ns, images=references(plans))    # exact tags in the pods

The engine is anything speaking the Docker API (Docker, or `podman system service`), reached
through the `docker` SDK: DOCKER_HOST or the default socket.

Two ways of getting the packages in without the network of a pod or of a registry:

    build_images(plans, client, wheelhouse=Path("~/.cache/surreal-kube/wheels"))
        # a Dockerfile with `<name>.requirements.txt` beside it gets its pinned wheels from the
        # host's wheelhouse (filled once by the host's pip), through a content-tagged wheels image
    load_into_containerd(plans, client, address="/run/containerd/containerd.sock")
        # like `kind load`: the built image goes into a node's containerd (namespace k8s.io)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import surreal_kube
from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.spec import Experiment, ImageBuild
from surreal_kube.launch.kube.images import buildcontext

TAG_LENGTH = 16


HASH_LABEL = "surreal.ai/content-hash"


Status = Literal["prebuilt", "present", "missing", "built", "pushed", "loaded", "kept"]


TRANSPORT_ARGS = frozenset({"WHEELS_IMAGE", "BASE_IMAGE"})

"""Build arguments that say where the bits come from, not what goes in: left out of the tag (the
pinned requirements file, in the context, says what goes in; a user image hashes its runtime
image's content hash, not the reference, which carries the registry)."""


PACKAGE_ROOT = "@surreal-kube"

"""In `spec.images.*.build` paths: the folder holding the installed `surreal_kube` package."""


DOCKERFILES = "surreal_kube/dockerfiles"

"""Where the Dockerfiles are, under PACKAGE_ROOT."""


USER_DOCKERFILE = "user.Dockerfile"


DEFAULT_PLATFORM = "linux/amd64"

"""What clusters run (GKE, EKS and most others): an image built on an arm64 laptop runs there."""


_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")


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
    platform: str = DEFAULT_PLATFORM
    base: ImagePlan | None = None
    """For a user image: the runtime image it is built FROM (built first when missing)."""

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


def package_root() -> Path:
    """The folder holding the installed `surreal_kube` package: what `@surreal-kube` means."""
    return Path(surreal_kube.__file__).resolve().parent.parent


def _resolve(base_dir: Path, path: str) -> Path:
    if path == PACKAGE_ROOT or path.startswith(PACKAGE_ROOT + "/"):
        return package_root() / path[len(PACKAGE_ROOT) :].lstrip("/")
    p = Path(path)
    return p if p.is_absolute() else base_dir / p


def default_platform() -> str:
    """$SURREAL_KUBE_PLATFORM, else linux/amd64: the platform every verb builds and tags for."""
    return check_platform(os.environ.get("SURREAL_KUBE_PLATFORM") or DEFAULT_PLATFORM)


def check_platform(platform: str) -> str:
    """`platform` if it is `os/arch[/variant]` (e.g. linux/amd64, linux/arm64), else SpecError."""
    if not _PLATFORM.match(platform):
        raise SpecError(
            f"platform {platform!r}: expected os/arch[/variant], e.g. linux/amd64 or linux/arm64"
        )
    return platform


def default_registry(context: str | None = None) -> str | None:
    """The registry when no profile names one: $SURREAL_KUBE_REGISTRY, else the settings file's
    for the kube context (None: the current one), set once by `surreal-kube registry`."""
    from surreal_kube.launch.kube.settings import registry_for

    return registry_for(context)


def declared_args(dockerfile: Path) -> set[str]:
    """The build arguments a Dockerfile declares (`ARG NAME`): the only ones it receives.

    A user image and its runtime image are built with one set of `--build-arg`s; each gets (and
    hashes) only its own, so the runtime's tag does not move with the user layer's arguments.
    """
    if not dockerfile.is_file():
        raise LaunchError(f"Dockerfile {str(dockerfile)!r} does not exist")
    names = set()
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)", line, re.IGNORECASE)
        if match:
            names.add(match.group(1))
    return names


@dataclass(frozen=True)
class UserProject:
    """A folder of the user's: their package and what it needs, built on top of our images."""

    path: Path
    name: str
    """Docker repository component: the project's name, lowercased."""


def user_project(folder: str | Path) -> UserProject | None:
    """The user project in `folder`, or None (no project there, or surreal-kube's own checkout).

    A project is a pyproject.toml whose `[project].name` is not surreal-kube, or, without one, a
    requirements.txt (the folder's name then names it).
    """
    import tomllib

    path = Path(folder).resolve()
    pyproject = path / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SpecError(f"{pyproject}: not valid TOML: {exc}") from None
        name = str(data.get("project", {}).get("name") or path.name)
    elif (path / "requirements.txt").is_file():
        name = path.name
    else:
        return None
    repo = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("._-") or "project"
    if repo.replace("_", "-") == "surreal-kube":
        return None
    return UserProject(path, repo)


def _user_plan(
    base: ImagePlan,
    project: UserProject,
    args: Mapping[str, str],
    registry: str | None,
    platform: str,
) -> ImagePlan:
    """The plan of `project` built FROM `base` (whose content hash it hashes)."""
    dockerfile = package_root() / DOCKERFILES / USER_DOCKERFILE
    own = {k: v for k, v in args.items() if k in declared_args(dockerfile) and k != "BASE_IMAGE"}
    hashed = {**own, "BASE_IMAGE": base.content_hash or base.reference}
    try:
        digest = buildcontext.content_hash(dockerfile, [project.path], hashed, platform)
    except LaunchError as exc:
        raise LaunchError(f"the image of project {str(project.path)!r}: {exc}") from None
    ref = tagged(f"{project.name}/surreal-kube-{base.key}", digest, registry)
    build_args = (*sorted(own.items()), ("BASE_IMAGE", base.reference))
    return ImagePlan(
        base.key,
        ref,
        "missing",
        base.build,
        dockerfile,
        (project.path,),
        digest,
        build_args,
        platform,
        base,
    )


def plan_offline(
    exp: Experiment,
    *,
    keys: Iterable[str] | None = None,
    registry: str | None = None,
    base_dir: str | Path | None = None,
    build_args: Mapping[str, str] | None = None,
    platform: str | None = None,
    project: bool = True,
) -> list[ImagePlan]:
    """Plans with exact references, from the files alone (status `prebuilt` or `missing`).

    Paths in `spec.images.*.build` are relative to `base_dir` (default: the current directory),
    `@surreal-kube/...` to the installed package (module docstring). registry None:
    `default_registry()`; platform None: `default_platform()`. With `project` and a user project
    in `base_dir`, every image built from our Dockerfiles becomes that project's image on top.
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    registry = registry if registry is not None else default_registry()
    platform = check_platform(platform) if platform is not None else default_platform()
    given = dict(build_args or {})
    users = user_project(base) if project else None
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
            declared = declared_args(dockerfile)
            args = {k: v for k, v in given.items() if k in declared}
            hashed = {k: v for k, v in args.items() if k not in TRANSPORT_ARGS}
            digest = buildcontext.content_hash(dockerfile, contexts, hashed, platform)
        except (LaunchError, OSError) as exc:
            raise LaunchError(
                f"spec.images.{key}: cannot compute the image tag: {exc} (paths are relative to "
                f"{str(base)!r}, {PACKAGE_ROOT} is {str(package_root())!r}); name a prebuilt "
                f"image with --set spec.images.{key}.image=REF"
            ) from None
        ref = tagged(spec.build.repository, digest, registry)
        plan = ImagePlan(
            key,
            ref,
            "missing",
            spec.build,
            dockerfile,
            contexts,
            digest,
            tuple(sorted(args.items())),
            platform,
        )
        if users is not None and spec.build.dockerfile.startswith(PACKAGE_ROOT + "/"):
            plan = _user_plan(plan, users, given, registry, platform)
        plans.append(plan)
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
