"""Build contexts and content-hash tags, without an engine."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from surreal_kube.errors import LaunchError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.images import buildcontext
from surreal_kube.launch.kube.images.planner import (
    plan_offline,
    planned_references,
    split_reference,
    tagged,
)

ROOT = Path(__file__).resolve().parents[3]


def make_context(tmp: Path) -> tuple[Path, Path]:
    ctx = tmp / "ctx"
    (ctx / "pkg").mkdir(parents=True)
    (ctx / "pkg" / "a.py").write_text("print('a')\n")
    (ctx / "run.sh").write_text("#!/bin/sh\n")
    (ctx / "notes.log").write_text("ignored\n")
    dockerfile = tmp / "img.Dockerfile"
    dockerfile.write_text("FROM scratch\nCOPY . /app\n")
    (tmp / "img.Dockerfile.dockerignore").write_text("# comment\n*.log\n")
    return dockerfile, ctx


def test_hash_tracks_content_not_metadata(tmp_path: Path) -> None:
    dockerfile, ctx = make_context(tmp_path)
    first = buildcontext.content_hash(dockerfile, [ctx])
    os.utime(ctx / "pkg" / "a.py", (1, 1))
    assert buildcontext.content_hash(dockerfile, [ctx]) == first  # mtime is not content
    (ctx / "notes.log").write_text("still ignored\n")
    assert buildcontext.content_hash(dockerfile, [ctx]) == first  # ignored by the Dockerfile's list
    (ctx / "run.sh").chmod(0o755)
    executable = buildcontext.content_hash(dockerfile, [ctx])
    assert executable != first
    (ctx / "pkg" / "a.py").write_text("print('b')\n")
    changed = buildcontext.content_hash(dockerfile, [ctx])
    assert changed not in (first, executable)
    assert buildcontext.content_hash(dockerfile, [ctx], {"X": "1"}) != changed
    dockerfile.write_text("FROM scratch\nCOPY . /srv\n")
    assert buildcontext.content_hash(dockerfile, [ctx]) != changed


def test_context_directory_ignore_file_when_dockerfile_has_none(tmp_path: Path) -> None:
    dockerfile, ctx = make_context(tmp_path)
    (tmp_path / "img.Dockerfile.dockerignore").unlink()
    (ctx / ".dockerignore").write_text("pkg\n")
    names = [e.arcname for e in buildcontext.collect(dockerfile, [ctx])]
    assert names == [".dockerignore", "notes.log", "run.sh"]


def test_contexts_merge_later_wins_and_tar_is_deterministic(tmp_path: Path) -> None:
    dockerfile, ctx = make_context(tmp_path)
    extra = tmp_path / "extra"
    (extra / "pkg").mkdir(parents=True)
    (extra / "pkg" / "a.py").write_text("override\n")
    (extra / "b.txt").write_text("b\n")
    blobs = []
    for _ in range(2):
        buf = io.BytesIO()
        buildcontext.write_tar(dockerfile, [ctx, extra], buf)
        blobs.append(buf.getvalue())
    assert blobs[0] == blobs[1]
    with tarfile.open(fileobj=io.BytesIO(blobs[0])) as tar:
        names = tar.getnames()
        assert tar.extractfile("pkg/a.py").read() == b"override\n"
        assert tar.extractfile(buildcontext.DOCKERFILE_IN_CONTEXT).read() == dockerfile.read_bytes()
        assert tar.getmember("run.sh").mtime == 0
    assert "notes.log" not in names and "b.txt" in names


CPU_DOCKERFILE = ROOT / "surreal_kube" / "dockerfiles" / "runtime-cpu.Dockerfile"


def test_default_runtime_context_is_only_the_package() -> None:
    entries = buildcontext.collect(CPU_DOCKERFILE, [ROOT])
    tops = {e.arcname.split("/")[0] for e in entries}
    assert tops == {"surreal_kube"}  # the pinned requirements and the recipe are inside it
    names = {e.arcname for e in entries}
    assert {
        "surreal_kube/dockerfiles/runtime-cpu.requirements.txt",
        "surreal_kube/dockerfiles/package.pyproject.toml",
    } <= names
    assert not [e for e in entries if "__pycache__" in e.arcname or e.arcname.endswith(".pyc")]


def test_planned_references_are_exact_tags() -> None:
    exp = resolve_experiment(
        "exp-i", sets=["images.gpu.image=nvcr.io/team/rl:2.1", "images.gpu.build=null"]
    )
    refs = planned_references(exp, base_dir=ROOT, registry="europe-docker.pkg.dev/p/r")
    assert refs["gpu"] == "nvcr.io/team/rl:2.1"
    repo, tag = split_reference(refs["cpu"])
    assert repo == "europe-docker.pkg.dev/p/r/surreal-kube/runtime-cpu" and len(tag) == 16
    digest = buildcontext.content_hash(CPU_DOCKERFILE, [ROOT], platform="linux/amd64")
    assert tag == digest[:16]
    assert planned_references(exp, base_dir=ROOT, registry="europe-docker.pkg.dev/p/r") == refs


def test_missing_dockerfile_says_how_to_fix(tmp_path: Path) -> None:
    exp = resolve_experiment("exp-i", sets=["images.cpu.build.dockerfile=docker/x.Dockerfile"])
    with pytest.raises(LaunchError) as err:
        plan_offline(exp, keys=["cpu"], base_dir=tmp_path)
    assert str(err.value) == (
        f"spec.images.cpu: cannot compute the image tag: Dockerfile "
        f"'{tmp_path}/docker/x.Dockerfile' does not exist (paths are relative to "
        f"'{tmp_path}', @surreal-kube is '{ROOT}'); name a prebuilt image with --set "
        f"spec.images.cpu.image=REF"
    )


def test_the_default_images_need_no_checkout(tmp_path: Path) -> None:
    """Anywhere (not a checkout, not a project): the packaged Dockerfiles, the same tags."""
    exp = resolve_experiment("exp-i")
    here = planned_references(exp, base_dir=ROOT)
    assert planned_references(exp, base_dir=tmp_path) == here


def test_reference_helpers() -> None:
    assert split_reference("localhost:5000/a/b:t1") == ("localhost:5000/a/b", "t1")
    assert split_reference("localhost:5000/a/b") == ("localhost:5000/a/b", "latest")
    assert split_reference("a/b@sha256:00") == ("a/b", "sha256:00")
    assert tagged("surreal/x", "ab" * 32, None) == "surreal/x:" + "ab" * 8
    assert tagged("surreal/x", "ab" * 32, "reg.io/p/") == "reg.io/p/surreal/x:" + "ab" * 8
