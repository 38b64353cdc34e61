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
$SURREAL_KUBE_REGISTRY: `default_registry`), read here by `build`, `render` and `create` alike.

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
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import surreal_kube
from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.spec import Experiment, ImageBuild
from surreal_kube.launch.kube.images import buildcontext

TAG_LENGTH = 16
HASH_LABEL = "surreal.ai/content-hash"
Status = Literal["prebuilt", "present", "missing", "built", "pushed", "loaded"]
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
_PIP_MACHINE = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}
WHEELS_REPOSITORY = "surreal-kube/wheels"
WHEELS_DOCKERFILE = "FROM scratch\nCOPY . /\n"
"""Wheels at the root: the Dockerfile mounts the whole image at /wheels (an empty `scratch` too)."""
GLIBC_MINOR = 36
"""Debian bookworm's glibc is 2.36: wheels for manylinux_2_5 .. manylinux_2_36 run in the image."""


def pip_target(arch: str = "x86_64") -> tuple[str, ...]:
    """`pip download` options for the image's interpreter and platform, whatever the host runs.

    pip takes each --platform literally (it widens only the legacy manylinux2014/2010 names), so
    every manylinux tag the image's glibc accepts is listed, legacy aliases included.
    """
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(GLIBC_MINOR, 4, -1)]
    platforms += [f"manylinux{legacy}_{arch}" for legacy in ("2014", "2010", "1")]
    platform_args = [arg for p in platforms for arg in ("--platform", p)]
    return (
        "--only-binary=:all:",
        *platform_args,
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
    )


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


def default_registry() -> str | None:
    """$SURREAL_KUBE_REGISTRY, when no profile names a registry: one setting for every verb."""
    return os.environ.get("SURREAL_KUBE_REGISTRY") or None


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


# -------------------------------------------------------------------------------- wheelhouse


def requirements_of(dockerfile: Path) -> Path | None:
    """`x/runtime-cpu.Dockerfile` -> `x/runtime-cpu.requirements.txt`, if that file exists.

    Its lines are `name==version` pins: what the image's `pip install --no-deps` installs.
    """
    name = dockerfile.name
    stem = name[: -len(".Dockerfile")] if name.endswith(".Dockerfile") else name
    candidate = dockerfile.with_name(f"{stem}.requirements.txt")
    return candidate if candidate.is_file() else None


def read_pins(requirements: Path) -> dict[str, str]:
    """Canonical package name -> pinned version; anything but `name==version` is an error."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for number, raw in enumerate(requirements.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            req = None
        spec = list(req.specifier) if req else []
        if req is None or len(spec) != 1 or spec[0].operator != "==" or req.extras:
            raise LaunchError(
                f"{requirements}:{number}: {line!r} is not a pin; each line must be name==version"
            )
        pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def _wheels_in(wheelhouse: Path, pins: Mapping[str, str]) -> dict[str, list[Path]]:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    found: dict[str, list[Path]] = {}
    for path in sorted(wheelhouse.glob("*.whl")):
        try:
            name, version, _build, _tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if name in pins and version == Version(pins[name]):
            found.setdefault(name, []).append(path)
    return found


def fill_wheelhouse(
    requirements: Path,
    wheelhouse: Path,
    progress: Progress | None = None,
    platform: str = DEFAULT_PLATFORM,
) -> list[Path]:
    """The wheel files of every pin, downloading only those the wheelhouse lacks.

    The download is the host's `pip download` with pip's own configuration (index, certificates,
    proxies), for the image's platform (`pip_target`), whatever the host runs; a warm wheelhouse
    never runs pip.
    """
    say = progress or (lambda _line: None)
    pins = read_pins(requirements)
    wheelhouse.mkdir(parents=True, exist_ok=True)
    found = _wheels_in(wheelhouse, pins)
    missing = sorted(set(pins) - set(found))
    if missing:
        say(f"downloading {len(missing)} of {len(pins)} wheels into {wheelhouse}")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            *pip_target(pip_machine(platform)),  # the image's platform, not the host's
            "--dest",
            str(wheelhouse),
            *(f"{name}=={pins[name]}" for name in missing),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise LaunchError(f"pip download into {wheelhouse} failed:\n{tail}")
        found = _wheels_in(wheelhouse, pins)
        still = sorted(set(pins) - set(found))
        if still:
            raise LaunchError(f"pip download left no wheel in {wheelhouse} for: {', '.join(still)}")
    return sorted(p for paths in found.values() for p in paths)


def pip_machine(platform: str) -> str:
    """linux/amd64 -> x86_64, linux/arm64 -> aarch64: the machine in wheel platform tags."""
    arch = platform.split("/")[1]
    return _PIP_MACHINE.get(arch, arch)


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


def default_wheelhouse() -> Path:
    """$SURREAL_KUBE_WHEELHOUSE, else ~/.cache/surreal-kube/wheels (XDG_CACHE_HOME respected)."""
    env = os.environ.get("SURREAL_KUBE_WHEELHOUSE")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "surreal-kube" / "wheels"


# ------------------------------------------------------------------------ release tag, loading


def release_tag(plan: ImagePlan, client: Any, version: str) -> ImagePlan:
    """Tag a built (or present) image also as `<repository>:<version>`: the chart's default image.

    The Helm chart runs the operator from the CPU runtime image (it carries
    `python -m surreal_kube.operator`) and names it by the chart's appVersion, so the image this
    build made is the one `helm install` runs. Content-hash tags stay the pods' exact references.
    """
    from docker.errors import APIError

    repository = plan.repository
    try:
        client.api.tag(plan.reference, repository, version, force=True)
    except APIError as exc:
        raise LaunchError(
            f"tagging {plan.reference} as {version} failed: {exc.explanation}"
        ) from exc
    return ImagePlan("operator", f"{repository}:{version}", "built", content_hash=plan.content_hash)


def normalized(reference: str) -> str:
    """The fully qualified name a kubelet asks containerd for: `a/b:t` -> `docker.io/a/b:t`."""
    first, sep, _rest = reference.partition("/")
    if not sep:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def check_containerd(address: str, ctr: str) -> str:
    """The ctr executable's path; SpecError (bad input, exit 2) if it or the socket is missing."""
    path = shutil.which(ctr)
    if path is None:
        raise SpecError(
            f"--ctr {ctr!r}: no such executable; name containerd's `ctr` (path or command on PATH)"
        )
    sock = Path(address.removeprefix("unix://"))
    if not sock.is_socket():
        raise SpecError(
            f"--containerd-address {address!r}: no containerd socket there; give the node's "
            "containerd socket, e.g. /run/containerd/containerd.sock"
        )
    return path


def load_into_containerd(
    plans: Sequence[ImagePlan],
    client: Any,
    *,
    address: str,
    ctr: str = "ctr",
    namespace: str = "k8s.io",
    progress: Progress | None = None,
) -> list[ImagePlan]:
    """Put built images into a node's containerd, like `kind load`, instead of pushing them.

    Each image leaves the engine as a docker-archive named by its normalized reference (what the
    kubelet asks for: `surreal-kube/x:t` is `docker.io/surreal-kube/x:t` to containerd), streamed
    into `ctr images import` in `namespace` (the CRI's), which unpacks it for the kubelet.
    """

    say = progress or (lambda _line: None)
    ctr_path = check_containerd(address, ctr)
    base = [ctr_path, "--address", address.removeprefix("unix://"), "--namespace", namespace]

    def names() -> set[str]:
        listed = subprocess.run([*base, "images", "ls", "-q"], capture_output=True, text=True)
        if listed.returncode != 0:
            raise LaunchError(f"ctr images ls failed: {listed.stderr.strip()}")
        return set(listed.stdout.split())

    have = names()
    sent: dict[str, str] = {}  # engine image id -> the name it was imported as
    out = []
    for plan in plans:
        if plan.status not in ("built", "present"):
            out.append(plan)
            continue
        full = normalized(plan.reference)
        image_id = client.images.get(plan.reference).id
        exact = plan.content_hash is not None and plan.tag == plan.content_hash[:TAG_LENGTH]
        if image_id in sent:  # the same image under another name: a tag, not a second copy
            say(f"tagging {sent[image_id]} as {full} in containerd")
            done = subprocess.run(
                [*base, "images", "tag", "--force", sent[image_id], full],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise LaunchError(f"ctr images tag {full} failed: {done.stderr.strip()}")
        elif exact and full in have:
            say(f"{full} is in containerd already (same content-hash tag)")
        else:
            say(f"loading {plan.reference} into containerd {address} ({namespace}) as {full}")
            _import(client, plan.reference, full, [*base, "images", "import"], plan.platform)
        sent[image_id] = full
        if full not in names():
            raise LaunchError(f"loading {plan.reference} left no image {full} in containerd")
        out.append(replace(plan, status="loaded"))
    return out


def _import(client: Any, reference: str, full: str, ctr_import: list[str], platform: str) -> None:
    """Stream the engine's docker-archive of `reference`, named `full`, into `ctr import`."""
    from docker.errors import APIError

    repository, tag = split_reference(full)
    try:
        client.api.tag(reference, repository, tag, force=True)
        stream = client.api.get_image(full)
    except APIError as exc:
        raise LaunchError(f"exporting {reference} failed: {exc.explanation}") from exc
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            # --local: the client unpacks for the CRI's snapshotter (containerd 2's transfer
            # service does not read a stream); one platform, the image's.
            [*ctr_import, "--local", "--platform", platform, "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        assert proc.stdin is not None
        try:
            for chunk in stream:
                proc.stdin.write(chunk)
        except BrokenPipeError:
            pass  # ctr stopped reading: its exit code and message say why
        finally:
            proc.stdin.close()
        code = proc.wait()
        err.seek(0)
        message = err.read().decode(errors="replace").strip()
    if code != 0:
        raise LaunchError(f"ctr images import of {reference} failed: {message}")
