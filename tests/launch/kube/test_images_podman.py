"""The image planner against a real engine: podman's Docker API, real builds of the real Dockerfiles.

The runtime Dockerfiles are built as they are, with build arguments that keep the build offline:
the debootstrap base instead of python:3.11-slim, and `pip install --no-deps --no-index` of the
project alone (no torch: `surreal-kube-role --help` does not import it). The real CPU image, torch
and all, is built in test_runtime_image_podman.py.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.images import engine as image_engine
from surreal_kube.launch.kube.images import planner as images
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.engine import (
    BASE_IMAGE,
    Engine,
    engine_or_skip,
)

pytestmark = pytest.mark.podman

ROOT = Path(__file__).resolve().parents[3]
OFFLINE_ARGS = {
    "PYTHON_IMAGE": BASE_IMAGE,
    "PIP_ARGS": "--no-deps --no-index --no-build-isolation",
    "VENV_ARGS": "--system-site-packages",  # the base's python3-wheel builds the project wheel
    "APT_PACKAGES": "",
    "REQUIREMENTS": "0",  # the CPU image: skip runtime-cpu.requirements.txt (torch and all)
}


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    yield from engine_or_skip()


def project_copy(dest: Path) -> Path:
    """The files the runtime images are built from (the package: its Dockerfiles are inside), in
    a folder the test may change; build from it with `snapshot_sets` and base_dir=`dest`."""
    dest.mkdir(parents=True)
    shutil.copytree(
        ROOT / "surreal_kube", dest / "surreal_kube", ignore=shutil.ignore_patterns("__pycache__")
    )
    return dest


def snapshot_sets(*keys: str) -> list[str]:
    """`--set`s that build the default images from a `project_copy` (paths relative to it)
    instead of the installed package: the same files give the same tags."""
    files = {"cpu": "runtime-cpu.Dockerfile", "gpu": "runtime-cuda.Dockerfile"}
    return [
        s
        for key in keys
        for s in (
            f"images.{key}.build.dockerfile=surreal_kube/dockerfiles/{files[key]}",
            f"images.{key}.build.context=[.]",
        )
    ]


def test_unchanged_is_kept_changed_is_rebuilt_and_the_image_runs(
    engine: Engine, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    cpu_dir = project_copy(tmp_path / "cpu")
    gpu_dir = project_copy(tmp_path / "gpu")
    repos = {"cpu": f"sk-test-{run}/runtime-cpu", "gpu": f"sk-test-{run}/runtime-cuda"}
    exp = resolve_experiment(
        "exp-img",
        sets=[
            f"images.cpu.build.dockerfile={cpu_dir}/surreal_kube/dockerfiles/runtime-cpu.Dockerfile",
            f"images.cpu.build.context=[{cpu_dir}]",
            f"images.cpu.build.repository={repos['cpu']}",
            f"images.gpu.build.dockerfile={gpu_dir}/surreal_kube/dockerfiles/runtime-cuda.Dockerfile",
            f"images.gpu.build.context=[{gpu_dir}]",
            f"images.gpu.build.repository={repos['gpu']}",
            "resources.learner.gpu=1",
        ],
    )
    client = image_engine.docker_client(engine.url)
    built: list[str] = []

    def progress(line: str) -> None:
        if line.startswith("building "):
            built.append(line.split()[1])

    def plan() -> list[images.ImagePlan]:
        return image_engine.plan_images(
            exp, client=client, keys=["cpu", "gpu"], build_args=OFFLINE_ARGS
        )

    try:
        first = plan()
        assert [p.status for p in first] == ["missing", "missing"]
        first = image_engine.build_images(first, client, progress=progress)
        assert [p.status for p in first] == ["built", "built"]
        assert built == [p.reference for p in first]
        ids = {p.key: client.images.get(p.reference).id for p in first}

        for p in first:
            done = engine.podman(
                "run", "--rm", "--network=host", p.reference, "surreal-kube-role", "--help"
            )
            assert done.returncode == 0, done.stderr
            assert "usage: surreal-kube-role" in done.stdout and "replay-shard" in done.stdout
            who = engine.podman("run", "--rm", "--network=host", p.reference, "id", "-u")
            assert who.stdout.strip() == "10001"  # non-root by default
        templates = engine.podman(
            "run",
            "--rm",
            "--network=host",
            first[0].reference,
            "sh",
            "-c",
            "ls /opt/surreal/lib/python3*/site-packages/surreal_kube/launch/kube/render/templates",
        )
        assert "statefulset.yaml.j2" in templates.stdout.split()  # package data is installed

        # unchanged context: same tags, nothing rebuilt
        built.clear()
        second = image_engine.build_images(plan(), client, progress=progress)
        assert [(p.reference, p.status) for p in second] == [
            (p.reference, "present") for p in first
        ]
        assert built == []
        assert {p.key: client.images.get(p.reference).id for p in second} == ids

        # one changed file in the CPU context: a new CPU tag, only that image rebuilt
        changed = cpu_dir / "surreal_kube" / "launch" / "kube" / "naming.py"
        changed.write_text(changed.read_text() + "\n# a change\n")
        third = plan()
        by_key = {p.key: p for p in third}
        assert by_key["cpu"].reference != first[0].reference and by_key["cpu"].status == "missing"
        assert by_key["gpu"].reference == first[1].reference and by_key["gpu"].status == "present"
        third = image_engine.build_images(third, client, progress=progress)
        assert built == [by_key["cpu"].reference]
        assert client.images.get(by_key["gpu"].reference).id == ids["gpu"]

        # the exact tags go into the pods
        objects = render_experiment(exp, "rl", images=images.references(third))
        pods = {
            o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]
            for o in objects
            if o["kind"] in ("Deployment", "StatefulSet")
        }
        assert pods["exp-img-learner"]["image"] == by_key["gpu"].reference
        assert pods["exp-img-replay"]["image"] == by_key["cpu"].reference
        assert {c["imagePullPolicy"] for c in pods.values()} == {"IfNotPresent"}
    finally:
        for repo in repos.values():
            listed = engine.podman("images", "-q", "--filter", f"reference=*{repo}*")
            for image_id in set(listed.stdout.split()):
                engine.podman("rmi", "-f", image_id)


def test_push_without_registry_is_refused(engine: Engine) -> None:
    from surreal_kube.errors import LaunchError

    exp = resolve_experiment("exp-img")
    client = image_engine.docker_client(engine.url)
    with pytest.raises(LaunchError, match="--push needs a registry"):
        image_engine.plan_images(exp, client=client, push=True, base_dir=ROOT)


def test_build_failure_reports_the_engine_error(engine: Engine, tmp_path: Path) -> None:
    from surreal_kube.errors import LaunchError

    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN exit 3\n")
    exp = resolve_experiment(
        "exp-img",
        sets=[
            f"images.cpu.build.dockerfile={tmp_path}/Dockerfile",
            f"images.cpu.build.context=[{tmp_path}]",
            f"images.cpu.build.repository=sk-test-{uuid.uuid4().hex[:8]}/broken",
        ],
    )
    client = image_engine.docker_client(engine.url)
    plans = image_engine.plan_images(exp, client=client, keys=["cpu"])
    with pytest.raises(LaunchError, match=r"building sk-test-\w+/broken:\w+ failed"):
        image_engine.build_images(plans, client)


def test_a_version_tag_never_moves_to_a_later_build(engine: Engine, tmp_path: Path) -> None:
    """Issue 24 item 6: `build` re-tagged `<repo>:<appVersion>` at every build while the chart
    pulls it IfNotPresent, so nodes kept a stale operator. The first build of a version keeps
    the tag; a later one is named by its content hash only, and the build says how to pin it."""
    client = image_engine.docker_client(engine.url)
    repo = f"sk-test-{uuid.uuid4().hex[:8]}/tiny"
    plans = []
    for stamp in ("first", "second"):
        folder = tmp_path / stamp
        folder.mkdir()
        (folder / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo {stamp} > /stamp\n")
        exp = resolve_experiment(
            "exp-img",
            sets=[
                f"images.cpu.build.dockerfile={folder}/Dockerfile",
                f"images.cpu.build.context=[{folder}]",
                f"images.cpu.build.repository={repo}",
            ],
        )
        (plan,) = image_engine.build_images(
            image_engine.plan_images(exp, client=client, keys=["cpu"]), client
        )
        plans.append(plan)
    said: list[str] = []
    try:
        first = image_engine.release_tag(plans[0], client, "9.9.9", said.append)
        assert first.status == "built" and first.reference == f"{repo}:9.9.9"
        again = image_engine.release_tag(plans[0], client, "9.9.9", said.append)
        assert again.status == "built" and said == []  # the same build: nothing moves
        later = image_engine.release_tag(plans[1], client, "9.9.9", said.append)
        assert later.status == "kept"
        ids = {p.reference: client.images.get(p.reference).id for p in plans}
        assert client.images.get(f"{repo}:9.9.9").id == ids[plans[0].reference]
        (line,) = said
        tag = plans[1].reference.rsplit(":", 1)[1]
        assert "version tags never move" in line and f"image.tag={tag}" in line
    finally:
        for ref in [*(p.reference for p in plans), f"{repo}:9.9.9"]:
            engine.podman("rmi", "-f", ref)
