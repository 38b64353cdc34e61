"""Packages into an image without the network: the host's wheelhouse, as a wheels image.

A Dockerfile with `<name>.requirements.txt` beside it gets its pinned wheels from a folder the
host's pip filled once (`fill_wheelhouse`, for the image's platform and glibc), sent to the
engine as a content-tagged `scratch` image the build mounts (`with_wheels`): no build downloads a
package twice, and none needs an index from inside the engine."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from surreal_kube.errors import LaunchError
from surreal_kube.launch.kube.images.planner import DEFAULT_PLATFORM, Progress

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


def default_wheelhouse() -> Path:
    """$SURREAL_KUBE_WHEELHOUSE, else ~/.cache/surreal-kube/wheels (XDG_CACHE_HOME respected)."""
    env = os.environ.get("SURREAL_KUBE_WHEELHOUSE")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "surreal-kube" / "wheels"
