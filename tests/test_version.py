"""One version, one resolution: `surreal_kube.__version__` is the only place the version is
written, and the locks pin every dependency within pyproject's ranges, in agreement."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import surreal_kube

ROOT = Path(__file__).resolve().parent.parent
DEV_LOCK = ROOT / "requirements" / "dev.lock"
IMAGE_LOCK = ROOT / "surreal_kube" / "dockerfiles" / "runtime-cpu.requirements.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pins(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, pinned = line.partition("==")
            assert sep, f"{path.name}: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = pinned
    return pins


def _requirements(*extras: str) -> list[Requirement]:
    project = PYPROJECT["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, lines) if canonicalize_name(r.name) != "surreal-kube"]


def test_pyproject_reads_the_version_from_the_package() -> None:
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "surreal_kube.__version__"
    }
    # the installed metadata is made from it (a stale install: `make install` again)
    assert version("surreal-kube") == surreal_kube.__version__


def test_the_chart_installs_this_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "surreal-kube" / "Chart.yaml").read_text())
    assert chart["appVersion"] == surreal_kube.__version__


def test_the_changelog_names_this_version_first() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## \[?(\d+\.\d+\.\d+[^\]\s]*)", text, re.MULTILINE)
    assert first is not None and first.group(1) == surreal_kube.__version__


def test_the_license_is_an_spdx_expression_with_its_file() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_dev_lock_pins_every_dependency_within_its_range() -> None:
    pins = _pins(DEV_LOCK)
    for req in _requirements("operator", "video", "dev"):
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in {DEV_LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (str(req), pins[name])


def test_the_image_lock_pins_what_the_image_runs_as_the_dev_lock_does() -> None:
    dev, image = _pins(DEV_LOCK), _pins(IMAGE_LOCK)
    for req in _requirements("operator", "video"):
        name = canonicalize_name(req.name)
        assert name in image, f"{req.name} is not pinned in {IMAGE_LOCK.name}"
        assert req.specifier.contains(image[name], prereleases=True), (str(req), image[name])
    differ = {n: (dev[n], image[n]) for n in dev.keys() & image.keys() if dev[n] != image[n]}
    assert differ == {}, "the two locks disagree (dev, image)"


CUDA_LOCK = ROOT / "surreal_kube" / "dockerfiles" / "runtime-cuda.requirements.txt"
CUDA_ONLY = {
    "cuda-bindings", "cuda-pathfinder", "cuda-toolkit", "nvidia-cuda-cccl", "nvidia-cusolver",
    "nvidia-nvjitlink", "nvidia-nvtx", "triton",
}  # fmt: skip


def test_the_cuda_image_lock_is_the_cpu_one_with_cudas_packages_of_the_dev_lock() -> None:
    """Issue 24 item 4: the CUDA image installed `.[video]` unpinned. Its lock now pins the same
    resolution as the CPU image's and the dev lock, plus the CUDA packages the CPU image drops."""
    dev, cpu, cuda = _pins(DEV_LOCK), _pins(IMAGE_LOCK), _pins(CUDA_LOCK)
    assert set(cuda) == set(cpu) | CUDA_ONLY
    assert {n: cuda[n] for n in cpu} == cpu
    assert {n: cuda[n] for n in CUDA_ONLY} == {n: dev[n] for n in CUDA_ONLY}
    dockerfile = (ROOT / "surreal_kube" / "dockerfiles" / "runtime-cuda.Dockerfile").read_text()
    assert "runtime-cuda.requirements.txt /src/requirements.txt" in dockerfile
    assert "--no-deps --only-binary=:all:" in dockerfile and '"/src[video]"' not in dockerfile
