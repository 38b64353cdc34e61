"""The wheelhouse, the transport build arguments, the release tag and `--load`'s input checks.

No engine here: the real builds are in test_runtime_image_podman.py, the real load in
tests/e2e/conftest.py (the e2e cluster's image, which tests/e2e/test_runtime_image.py runs).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import surreal_kube
from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.images import load as image_load
from surreal_kube.launch.kube.images import planner as images
from surreal_kube.launch.kube.images import wheelhouse

ROOT = Path(__file__).resolve().parents[3]
CPU_DOCKERFILE = ROOT / "surreal_kube" / "dockerfiles" / "runtime-cpu.Dockerfile"
LOCK = ROOT / "surreal_kube" / "dockerfiles" / "runtime-cpu.requirements.txt"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "surreal_kube.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_cpu_image_pins_every_direct_dependency_within_pyprojects_range() -> None:
    """pyproject gives the library's ranges; the image's lock pins one version inside each
    (and torch, exact in both, the same one)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = wheelhouse.read_pins(LOCK)
    for line in project["dependencies"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{line}: not pinned in {LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (line, pins[name])
    torch = next(Requirement(x) for x in project["dependencies"] if x.startswith("torch"))
    assert [s.operator for s in torch.specifier] == ["=="]
    assert wheelhouse.requirements_of(CPU_DOCKERFILE) == LOCK
    # what a CPU process never loads stays out (the Dockerfile's comment has the evidence)
    assert not {"triton", "cuda-toolkit", "nvidia-cusolver", "nvidia-nvjitlink"} & set(pins)


def test_a_requirements_line_that_is_not_a_pin_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "x.requirements.txt"
    lock.write_text("# comment\nnumpy==2.4.6\ntorch>=2\n")
    with pytest.raises(LaunchError, match=r"x\.requirements\.txt:3: 'torch>=2' is not a pin"):
        wheelhouse.read_pins(lock)


def test_a_warm_wheelhouse_runs_no_pip(tmp_path: Path) -> None:
    lock = tmp_path / "img.requirements.txt"
    lock.write_text("Foo_Bar==1.0\nbaz==2.0.1  # why\n")
    house = tmp_path / "wheels"
    house.mkdir()
    wanted = [house / "foo_bar-1.0-py3-none-any.whl", house / "baz-2.0.1-py3-none-any.whl"]
    for w in [*wanted, house / "baz-1.9-py3-none-any.whl", house / "notes.txt"]:
        w.write_bytes(b"x")
    # a pip run would fail: these packages exist nowhere
    assert wheelhouse.fill_wheelhouse(lock, house) == sorted(wanted)


def test_a_missing_pin_that_pip_cannot_find_is_a_clear_error(tmp_path: Path) -> None:
    lock = tmp_path / "img.requirements.txt"
    lock.write_text("surreal-kube-no-such-package-ever==0.0.1\n")
    with pytest.raises(LaunchError, match=r"pip download into .* failed"):
        wheelhouse.fill_wheelhouse(lock, tmp_path / "wheels")


def test_wheels_image_is_a_transport_argument_and_leaves_the_tag_alone() -> None:
    exp = resolve_experiment("exp-img")
    (plain,) = images.plan_offline(exp, keys=["cpu"], base_dir=ROOT)
    (moved,) = images.plan_offline(
        exp, keys=["cpu"], base_dir=ROOT, build_args={"WHEELS_IMAGE": "surreal-kube/wheels:1"}
    )
    (based,) = images.plan_offline(
        exp, keys=["cpu"], base_dir=ROOT, build_args={"PYTHON_IMAGE": "other:1"}
    )
    assert moved.reference == plain.reference
    assert based.reference != plain.reference  # a different base is a different image
    assert ("WHEELS_IMAGE", "surreal-kube/wheels:1") in moved.build_args


@pytest.mark.parametrize(
    ("ref", "full"),
    [
        ("surreal-kube/runtime-cpu:abc", "docker.io/surreal-kube/runtime-cpu:abc"),
        ("busybox:1", "docker.io/library/busybox:1"),
        ("localhost/a/b:1", "localhost/a/b:1"),
        ("registry.test:5000/a/b:1", "registry.test:5000/a/b:1"),
        ("gcr.io/p/x@sha256:" + "0" * 64, "gcr.io/p/x@sha256:" + "0" * 64),
    ],
)
def test_normalized_is_what_the_kubelet_asks_containerd_for(ref: str, full: str) -> None:
    assert image_load.normalized(ref) == full


def test_load_checks_ctr_and_the_socket(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="--ctr 'no-such-ctr-here': no such executable"):
        image_load.check_containerd(str(tmp_path / "c.sock"), "no-such-ctr-here")
    with pytest.raises(SpecError, match=r"--containerd-address .*: no containerd socket there"):
        image_load.check_containerd(str(tmp_path / "c.sock"), "sh")
    path = tmp_path / "c.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert image_load.check_containerd(f"unix://{path}", "sh").endswith("/sh")


def test_build_load_without_a_socket_fails_before_building(tmp_path: Path) -> None:
    res = cli(
        "build",
        "exp",
        "--load",
        "--ctr",
        "sh",
        "--containerd-address",
        str(tmp_path / "none.sock"),
        "--engine",
        "unix:///nonexistent/podman.sock",
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no containerd socket there" in lines[0]
    assert "container engine" not in res.stderr  # refused before the engine is asked


def test_the_charts_operator_image_is_the_one_build_tags() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "surreal-kube" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "charts" / "surreal-kube" / "values.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    exp = resolve_experiment("exp-img")
    assert values["image"]["repository"] == exp.spec.images["cpu"].build.repository
    assert values["image"]["tag"] == ""  # -> appVersion
    # build tags <repository>:<version>, the version written once in the package
    assert chart["appVersion"] == surreal_kube.__version__
    assert "version" in project.get("dynamic", [])


def test_pip_target_lists_every_manylinux_tag_the_images_glibc_runs() -> None:
    """pip takes --platform literally: a wheel tagged only manylinux_2_28 (glfw) or
    manylinux_2_31 (tensorboard-data-server) is found only if that exact tag is listed."""
    args = wheelhouse.pip_target("x86_64")
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    for tag in (
        "manylinux_2_36",
        "manylinux_2_31",
        "manylinux_2_28",
        "manylinux_2_17",
        "manylinux_2_5",
        "manylinux2014",
        "manylinux1",
    ):
        assert f"{tag}_x86_64" in platforms
    assert "manylinux_2_37_x86_64" not in platforms  # newer than bookworm's glibc
    assert args[args.index("--abi") + 1] == "cp311"
