"""`surreal-kube render` and `surreal-kube build` as a person uses them: output, exit codes, messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
SK = [sys.executable, "-m", "surreal_kube.cli.main"]
KWOK_POOLS = ROOT / "tests" / "cluster" / "kwok" / "pools.yaml"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SK, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_render_prints_every_object_with_content_hash_tags() -> None:
    res = cli("render", "exp-ppo-ant", "--num-agents", "8", "--agent-batch", "4", "-n", "rl")
    assert res.returncode == 0, res.stderr
    objects = list(yaml.safe_load_all(res.stdout))
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "ConfigMap" and kinds.count("StatefulSet") == 2
    assert {o["metadata"]["namespace"] for o in objects} == {"rl"}
    agents = next(o for o in objects if o["kind"] == "StatefulSet")
    image = agents["spec"]["template"]["spec"]["containers"][0]["image"]
    repo, tag = image.rsplit(":", 1)
    assert repo == "surreal-kube/runtime-cpu" and len(tag) == 16
    used = {
        c["image"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert used == {image}  # no GPU component: the CUDA image is not used


def test_render_json_and_explicit_images() -> None:
    res = cli(
        "render",
        "exp",
        "-o",
        "json",
        "--image",
        "cpu=reg.io/rl/cpu:v1",
        "--set",
        "resources.learner.gpu=1",
        "--image",
        "gpu=reg.io/rl/gpu:v1",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    images = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["image"]
        for o in doc["items"]
        if o["kind"] in ("Deployment", "StatefulSet")
    }
    assert (
        images["exp-learner"] == "reg.io/rl/gpu:v1" and images["exp-replay"] == "reg.io/rl/cpu:v1"
    )
    assert {o["metadata"]["namespace"] for o in doc["items"]} == {"default"}


def test_render_with_profile_refuses_what_cannot_fit() -> None:
    res = cli(
        "render",
        "exp",
        "--profile",
        str(KWOK_POOLS),
        "--set",
        "resources.learner.gpu=8",
        "--image",
        "cpu=a:b",
        "--image",
        "gpu=c:d",
    )
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.strip() == (
        "error: cannot place learner: each pod asks for cpu 2, memory 4Gi, nvidia.com/gpu 8, but "
        "no node pool has a node that large; the largest, gpu-pool, offers cpu 16, memory 64Gi, "
        "nvidia.com/gpu 4 per node"
    )


def test_render_with_profile_places_pods() -> None:
    res = cli(
        "render",
        "exp",
        "--profile",
        str(KWOK_POOLS),
        "--set",
        "resources.agent.gpu=1",
        "--image",
        "cpu=a:b",
        "--image",
        "gpu=c:d",
    )
    assert res.returncode == 0, res.stderr
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in yaml.safe_load_all(res.stdout)
        if o["kind"] in ("Deployment", "StatefulSet")
    }
    assert pods["exp-agents"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "gpu-pool"}
    assert pods["exp-learner"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-pool"}


def test_render_usage_errors() -> None:
    res = cli("render", "exp", "--image", "tpu=x:y")
    assert res.returncode == 2
    assert (
        res.stderr.strip() == "error: --image tpu=...: no such key in spec.images (keys: cpu, gpu)"
    )
    res = cli("render", "exp", "--image", "cpu")
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == "error: --image 'cpu': expected KEY=REF, e.g. cpu=registry/runtime:1a2b"
    )
    res = cli("render", "exp", "-o", "xml")
    assert res.returncode == 2 and "--output 'xml': unknown format" in res.stderr


def test_render_outside_the_checkout_uses_the_packaged_dockerfiles(tmp_path: Path) -> None:
    """Issue 12 item 9: the Dockerfiles ship in the package; the tag is the checkout's."""
    here = cli("render", "exp", "-o", "json")
    there = cli("render", "exp", "-o", "json", cwd=tmp_path)
    assert there.returncode == 0, there.stderr
    assert there.stdout == here.stdout
    res = cli("render", "exp", "--set", "images.cpu.build.dockerfile=x.Dockerfile", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.startswith("error: spec.images.cpu: cannot compute the image tag: Dockerfile")
    assert "--set spec.images.cpu.image=REF" in res.stderr


def test_build_without_an_engine_says_how_to_start_one() -> None:
    res = cli("build", "exp", "--engine", "unix:///nonexistent/podman.sock")
    assert res.returncode == 1
    assert res.stderr.startswith(
        "error: cannot reach a container engine at unix:///nonexistent/podman.sock"
    )
    assert "podman system service" in res.stderr


def test_build_push_and_kind_exclude_each_other() -> None:
    res = cli("build", "exp", "--push", "--kind-load", "kind")
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == "error: --push and --kind-load exclude each other: push to a registry or load"
    )


def test_help_imports_no_client() -> None:
    """`--help` stays fast because it imports no client; how fast is bench/cli.py's row."""
    code = (
        "import sys; from surreal_kube.cli import main; "
        "import surreal_kube.cli.verbs.render, surreal_kube.cli.verbs.build; "
        "print(sorted(m for m in ('kubernetes', 'docker', 'jinja2') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stderr
    res = cli("build", "--help")
    assert res.returncode == 0 and "--push" in res.stdout
