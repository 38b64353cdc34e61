"""The packaged Dockerfiles, the platform and registry every verb agrees on, and the user-project
image plan (issue 12 items 7 and 9), without an engine: the builds are in test_images_podman.py and
tests/cli/test_user_project.py."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.images import planner as images
from surreal_kube.launch.kube.images import wheelhouse
from tests.envs.userpkg import write_user_project

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = ROOT / "surreal_kube" / "dockerfiles"


def final_stage_env(dockerfile: Path) -> dict[str, str]:
    """The ENV of a Dockerfile's last stage, as `docker image inspect` would show what it sets
    (continuation lines joined, `KEY=VALUE` pairs split as the shell would)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        if words[0].upper() == "FROM":
            env = {}
        elif words[0].upper() == "ENV":
            for pair in shlex.split(words[1]):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def test_the_cuda_image_finds_gkes_driver_and_claims_no_gpu() -> None:
    """The CUDA image is too heavy to build here: its Dockerfile's resulting ENV is read instead."""
    env = final_stage_env(DOCKERFILES / "runtime-cuda.Dockerfile")
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin sets it per pod
    assert "/usr/local/nvidia/lib64" in env["LD_LIBRARY_PATH"].split(":")  # GKE mounts it there
    assert "/usr/local/nvidia/bin" in env["PATH"].split(":")
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility,graphics"
    cpu = final_stage_env(DOCKERFILES / "runtime-cpu.Dockerfile")
    assert "NVIDIA_VISIBLE_DEVICES" not in cpu


def test_the_images_build_recipe_is_the_projects() -> None:
    """package.pyproject.toml installs the package in the images: it must say what pyproject does."""
    ours = tomllib.loads((ROOT / "pyproject.toml").read_text())
    recipe = tomllib.loads((DOCKERFILES / "package.pyproject.toml").read_text())
    assert recipe["build-system"] == ours["build-system"]
    keep = ("name", "dynamic", "description", "requires-python", "dependencies")
    assert {k: recipe["project"][k] for k in keep} == {k: ours["project"][k] for k in keep}
    # the same license, as a table an older setuptools reads (the recipe says why)
    assert recipe["project"]["license"] == {"text": ours["project"]["license"]}
    extras = dict(ours["project"]["optional-dependencies"])
    del extras["dev"]
    assert recipe["project"]["optional-dependencies"] == extras
    assert recipe["project"]["scripts"] == ours["project"]["scripts"]
    for table in ("packages", "package-data", "dynamic"):
        assert recipe["tool"]["setuptools"][table] == ours["tool"]["setuptools"][table]


def test_the_packaged_dockerfiles_are_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "dockerfiles/*" in data["package-data"]["surreal_kube"]
    assert not (ROOT / "dockerfiles").exists()  # one copy, inside the package


def test_the_platform_is_amd64_by_default_and_part_of_the_tag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SURREAL_KUBE_PLATFORM", raising=False)
    exp = resolve_experiment("exp-p")
    (amd,) = images.plan_offline(exp, keys=["cpu"])
    assert amd.platform == "linux/amd64"
    (same,) = images.plan_offline(exp, keys=["cpu"], platform="linux/amd64")
    (arm,) = images.plan_offline(exp, keys=["cpu"], platform="linux/arm64")
    assert same.reference == amd.reference
    assert arm.reference != amd.reference and arm.repository == amd.repository
    monkeypatch.setenv("SURREAL_KUBE_PLATFORM", "linux/arm64")
    (from_env,) = images.plan_offline(exp, keys=["cpu"])
    assert from_env.reference == arm.reference
    with pytest.raises(SpecError, match=r"platform 'amd64': expected os/arch\[/variant\]"):
        images.plan_offline(exp, keys=["cpu"], platform="amd64")
    assert wheelhouse.pip_machine("linux/amd64") == "x86_64"
    assert wheelhouse.pip_machine("linux/arm64") == "aarch64"


def test_one_registry_setting_for_every_verb(monkeypatch: pytest.MonkeyPatch) -> None:
    exp = resolve_experiment("exp-r")
    monkeypatch.delenv("SURREAL_KUBE_REGISTRY", raising=False)
    (plain,) = images.plan_offline(exp, keys=["cpu"])
    monkeypatch.setenv("SURREAL_KUBE_REGISTRY", "europe-docker.pkg.dev/p/r")
    (env,) = images.plan_offline(exp, keys=["cpu"])
    assert env.reference == f"europe-docker.pkg.dev/p/r/{plain.reference}"
    (profile,) = images.plan_offline(exp, keys=["cpu"], registry="reg.example/x")
    assert profile.reference == f"reg.example/x/{plain.reference}"  # the profile's wins


def test_a_user_project_gets_its_image_on_top_of_the_runtime(tmp_path: Path) -> None:
    project = write_user_project(tmp_path / "proj")
    exp = resolve_experiment("exp-u")
    (runtime,) = images.plan_offline(exp, keys=["cpu"], base_dir=ROOT)
    (user,) = images.plan_offline(exp, keys=["cpu"], base_dir=project)
    assert user.base == runtime
    assert user.repository == "mypkg/surreal-kube-cpu" and len(user.tag) == 16
    assert user.dockerfile == DOCKERFILES / "user.Dockerfile"
    assert user.contexts == (project.resolve(),)
    assert dict(user.build_args)["BASE_IMAGE"] == runtime.reference
    assert images.references([user]) == {"cpu": user.reference}
    # the same folder, the same tag: what `build`, `render` and `create` compute alike
    assert images.plan_offline(exp, keys=["cpu"], base_dir=project) == [user]

    # the project's files are in the tag; its virtual environment and caches are not
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / ".venv" / "lib" / "big.so").write_bytes(b"x" * 1000)
    (project / "mypkg" / "__pycache__").mkdir()
    (project / "mypkg" / "__pycache__" / "envs.cpython-311.pyc").write_bytes(b"x")
    assert images.plan_offline(exp, keys=["cpu"], base_dir=project) == [user]
    (project / "mypkg" / "envs.py").write_text((project / "mypkg" / "envs.py").read_text() + "\n")
    (changed,) = images.plan_offline(exp, keys=["cpu"], base_dir=project)
    assert changed.reference != user.reference and changed.base == runtime

    # the user layer's own arguments leave the runtime's tag alone; the runtime's move both
    (offline,) = images.plan_offline(
        exp, keys=["cpu"], base_dir=project, build_args={"PROJECT_PIP_ARGS": "--no-index"}
    )
    assert offline.base == runtime and offline.reference != changed.reference
    (rebased,) = images.plan_offline(
        exp, keys=["cpu"], base_dir=project, build_args={"PYTHON_IMAGE": "other:1"}
    )
    assert rebased.base is not None and rebased.base.reference != runtime.reference
    assert rebased.reference != changed.reference


def test_a_requirements_only_project_and_its_own_dockerignore(tmp_path: Path) -> None:
    project = write_user_project(tmp_path / "Tiny_Proj", "tinyproj", pyproject=False)
    exp = resolve_experiment("exp-u")
    (user,) = images.plan_offline(exp, keys=["cpu"], base_dir=project)
    assert user.repository == "tiny_proj/surreal-kube-cpu"
    (project / "data.bin").write_bytes(b"1")
    (with_data,) = images.plan_offline(exp, keys=["cpu"], base_dir=project)
    assert with_data.reference != user.reference
    (project / ".dockerignore").write_text("data.bin\n")  # the project's rules replace ours
    (ignored,) = images.plan_offline(exp, keys=["cpu"], base_dir=project)
    assert ignored.reference not in (user.reference, with_data.reference)  # .dockerignore is in
    (project / "data.bin").write_bytes(b"2")
    assert images.plan_offline(exp, keys=["cpu"], base_dir=project) == [ignored]


def test_what_is_not_a_user_project(tmp_path: Path) -> None:
    assert images.user_project(ROOT) is None  # surreal-kube's own checkout
    assert images.user_project(tmp_path) is None  # nothing there
    exp = resolve_experiment(
        "exp-u", sets=["images.gpu.image=nvcr.io/team/rl:2.1", "images.gpu.build=null"]
    )
    project = write_user_project(tmp_path / "proj")
    plans = {p.key: p for p in images.plan_offline(exp, base_dir=project)}
    assert plans["gpu"].reference == "nvcr.io/team/rl:2.1"  # a prebuilt image is used as is
    assert plans["cpu"].base is not None
    (project / "pyproject.toml").write_text("[project\n")
    with pytest.raises(SpecError, match=r"pyproject.toml: not valid TOML"):
        images.plan_offline(exp, base_dir=project)
