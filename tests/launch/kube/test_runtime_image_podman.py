"""The real CPU runtime image (torch, MuJoCo, gymnasium, the project), built through podman's
Docker API exactly as `surreal-kube build` builds it, then run.

The base is the debootstrap image (no registry is reachable); the pinned wheels come from the
host's wheelhouse (~/.cache/surreal-kube/wheels, or $SURREAL_KUBE_WHEELHOUSE), downloaded once by
the host's pip. A cold build (empty wheelhouse and podman store) takes minutes; a warm one finds
the image by its content-hash tag and builds nothing, which the first test checks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.images import engine as image_engine
from surreal_kube.launch.kube.images import wheelhouse
from tests.launch.kube.engine import (
    BASE_IMAGE,
    Engine,
    engine_or_skip,
)
from tests.launch.kube.test_images_podman import project_copy, snapshot_sets

pytestmark = [pytest.mark.podman, pytest.mark.slow, pytest.mark.timeout(3600)]

BUILD_ARGS = {"PYTHON_IMAGE": BASE_IMAGE}


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    yield from engine_or_skip()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of the files the image is built from (same content, same tag as the checkout),
    so that edits to the checkout during the session do not change the tag under the tests."""
    return project_copy(tmp_path_factory.mktemp("runtime-image") / "project")


@pytest.fixture(scope="module")
def runtime_image(engine: Engine, project: Path) -> str:
    """The real runtime-cpu image of this checkout: built if missing, else reused."""
    return build_runtime_cpu(engine.url, project)


def build_runtime_cpu(engine_url: str, project: Path) -> str:
    """Build (or find) the runtime-cpu image of `project`; returns its exact reference."""
    exp = resolve_experiment("exp-img", sets=snapshot_sets("cpu"))
    client = image_engine.docker_client(engine_url)
    plans = image_engine.plan_images(
        exp, client=client, keys=["cpu"], base_dir=project, build_args=BUILD_ARGS
    )
    (plan,) = image_engine.build_images(
        plans, client, progress=print, wheelhouse=wheelhouse.default_wheelhouse()
    )
    assert plan.status in ("built", "present")
    return plan.reference


def run(engine: Engine, image: str, *cmd: str, timeout: float = 300) -> str:
    """`podman run` as a pod runs it: non-root, read-only root file system, no network."""
    done = engine.podman(
        "run", "--rm", "--network=none", "--read-only", image, *cmd, timeout=timeout
    )
    assert done.returncode == 0, f"{cmd}: {done.stderr[-3000:]}"
    return done.stdout


def test_the_image_is_tagged_by_content_and_not_rebuilt(
    engine: Engine, runtime_image: str, project: Path
) -> None:
    built: list[str] = []
    exp = resolve_experiment("exp-img", sets=snapshot_sets("cpu"))
    client = image_engine.docker_client(engine.url)
    again = image_engine.plan_images(
        exp, client=client, keys=["cpu"], base_dir=project, build_args=BUILD_ARGS
    )
    assert [(p.reference, p.status) for p in again] == [(runtime_image, "present")]
    image_engine.build_images(
        again, client, progress=built.append, wheelhouse=wheelhouse.default_wheelhouse()
    )
    assert built == []  # nothing built, no wheel downloaded
    size = client.images.get(runtime_image).attrs["Size"]
    print(f"runtime-cpu image {runtime_image}: {size / 1e9:.2f} GB")


def test_role_entry_point_and_operator_run_as_non_root(engine: Engine, runtime_image: str) -> None:
    out = run(engine, runtime_image, "surreal-kube-role", "--help")
    assert "usage: surreal-kube-role" in out and "replay-shard" in out
    assert run(engine, runtime_image, "id", "-u").strip() == "10001"
    out = run(engine, runtime_image, "surreal-kube-operator", "--help")
    assert "--namespace" in out


TORCH_CHECK = """
import json, torch, torch.nn as nn
torch.manual_seed(0)
x = torch.randn(256, 8); y = x.sum(1, keepdim=True)
net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
first = None
for _ in range(200):
    loss = ((net(x) - y) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    first = first if first is not None else loss.item()
torch.save(net.state_dict(), "/tmp/net.pt")
net.load_state_dict(torch.load("/tmp/net.pt"))
print(json.dumps({"version": torch.__version__, "cuda": torch.cuda.is_available(),
                  "first": first, "last": loss.item()}))
"""


def test_torch_imports_and_trains_on_the_cpu_without_the_pruned_cuda_libraries(
    engine: Engine, runtime_image: str
) -> None:
    out = json.loads(run(engine, runtime_image, "python", "-c", TORCH_CHECK).strip())
    assert out["version"].startswith("2.15.0") and out["cuda"] is False
    assert out["last"] < out["first"] / 10  # it learned
    # what the Dockerfile removed is really gone: no triton, no cuDNN engines, no cusolver
    listing = run(
        engine,
        runtime_image,
        "sh",
        "-c",
        "cd /opt/surreal/lib/python3.11/site-packages && ls -d triton nvidia/cu13/lib/* "
        "nvidia/cudnn/lib/* 2>/dev/null; python -m pip list --format=freeze 2>/dev/null",
    )
    names = {os.path.basename(line) for line in listing.split()}
    assert "triton" not in names and "libcudnn_engines_precompiled.so.9" not in names
    assert "libcusolver.so.12" not in names and "libcudnn.so.9" in names
    assert "torch==2.15.0" in listing.split()


MUJOCO_CHECK = """
import json, gymnasium as gym, numpy as np
env = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=64, height=48)
obs, _ = env.reset(seed=0)
total = 0.0
for _ in range(100):
    obs, r, term, trunc, _ = env.step(env.action_space.sample())
    total += float(r)
frame = env.render()
print(json.dumps({"obs": list(obs.shape), "frame": list(frame.shape),
                  "lit": int(np.count_nonzero(frame)), "finite": bool(np.isfinite(total))}))
"""


def test_mujoco_steps_and_renders_offscreen(engine: Engine, runtime_image: str) -> None:
    out = json.loads(run(engine, runtime_image, "python", "-c", MUJOCO_CHECK).strip())
    assert out["obs"] == [17] and out["finite"]
    assert out["frame"] == [48, 64, 3] and out["lit"] > 0  # OSMesa drew something


def test_a_whole_local_experiment_runs_inside_the_image(engine: Engine, runtime_image: str) -> None:
    """Every role as a real process in one container: agents step MuJoCo, the learner trains."""
    script = (
        "surreal-kube create exp-img --local --root /tmp/exps --env gym:HalfCheetah-v5 "
        "--num-agents 1 --num-evals 1 --max-env-steps 3000 --max-time 240 >/tmp/out 2>&1; "
        "rc=$?; tail -20 /tmp/out; echo RC=$rc; ls /tmp/exps/exp-img/results"
    )
    out = run(engine, runtime_image, "sh", "-c", script, timeout=600)
    assert "RC=0" in out, out
    assert "exp-img: succeeded (reached 3000 env steps)" in out
    assert {"summary.json", "learning_curve.png"} <= set(out.split())
