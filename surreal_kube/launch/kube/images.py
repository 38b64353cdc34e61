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

Two ways of getting the packages in without the network of a pod or of a registry:

    build_images(plans, client, wheelhouse=Path("~/.cache/surreal-kube/wheels"))
        # a Dockerfile with `<name>.requirements.txt` beside it gets its pinned wheels from the
        # host's wheelhouse (filled once by the host's pip), through a content-tagged wheels image
    load_into_containerd(plans, client, address="/run/containerd/containerd.sock")
        # like `kind load`: the built image goes into a node's containerd (namespace k8s.io)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.spec import Experiment, ImageBuild
from surreal_kube.launch.kube import buildcontext

TAG_LENGTH = 16
HASH_LABEL = "surreal.ai/content-hash"
Status = Literal["prebuilt", "present", "missing", "built", "pushed", "loaded"]
TRANSPORT_ARGS = frozenset({"WHEELS_IMAGE"})
"""Build arguments that say where the bits come from, not what goes in: left out of the tag (the
pinned requirements file, in the context, says what goes in)."""
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
        hashed = {k: v for k, v in args if k not in TRANSPORT_ARGS}
        try:
            digest = buildcontext.content_hash(dockerfile, contexts, hashed)
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
    wheelhouse: Path | None = None,
) -> list[ImagePlan]:
    """Build every `missing` plan (and push it if `push`); returns the plans with new statuses.

    With a `wheelhouse`, a plan whose Dockerfile has pinned requirements beside it
    (`requirements_of`) installs them from wheels the host downloaded once (`with_wheels`), so
    no build downloads a package twice and none needs an index from inside the engine.
    """
    say = progress or (lambda _line: None)
    out = []
    for plan in plans:
        if plan.status == "missing":
            if not (push and exists_locally(client, plan.reference)):
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
    requirements: Path, wheelhouse: Path, progress: Progress | None = None
) -> list[Path]:
    """The wheel files of every pin, downloading only those the wheelhouse lacks.

    The download is the host's `pip download` with pip's own configuration (index, certificates,
    proxies), for the image's platform (`pip_target`); a warm wheelhouse never runs pip.
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
            *pip_target(os.uname().machine),  # the engine builds for this machine
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
    files = fill_wheelhouse(requirements, wheelhouse.expanduser(), progress)
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


def _platform() -> str:
    import platform

    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
    return f"linux/{arch.get(machine, machine)}"


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
            _import(client, plan.reference, full, [*base, "images", "import"])
        sent[image_id] = full
        if full not in names():
            raise LaunchError(f"loading {plan.reference} left no image {full} in containerd")
        out.append(replace(plan, status="loaded"))
    return out


def _import(client: Any, reference: str, full: str, ctr_import: list[str]) -> None:
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
            # service does not read a stream); one platform, the engine's.
            [*ctr_import, "--local", "--platform", _platform(), "-"],
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
