"""Autoscale benchmark: a GPU experiment created on a GPU pool at zero nodes, create to the
learner scheduled on the node the autoscaler adds, against a bare GPU pod in the same run.

    python bench/autoscale.py [--quick]

A private control plane (tests/cluster/controlplane.py) with no static node, and Karpenter's kwok
provider (tests/cluster/addons.py) growing GKE-shaped pools from 0: cpu-pool (8 CPU nodes) and
gpu-pool (16 CPU, 4 GPUs, GKE's GPU taint). Karpenter gathers pending pods for a batch window
before it provisions (its --batch-idle-duration 1 s / --batch-max-duration 2 s here; 1 s / 10 s
by default; GKE's cluster autoscaler scans every 10 s), then kwok makes the node Ready at once:
on GKE a real node joins in about a minute, which this does not measure.

Each round, interleaved: the reference (a bare pod asking for the learner's CPU, memory and one
GPU, with the pool's selector and GKE's GPU toleration, POSTed to the API server) and ours
(`surreal-kube create` of a small experiment whose learner asks for one GPU, the CLI process
from its start, pre-flight included), each timed from its start until a watch sees the learner's
pod bound to a node, and until it is Running; between runs everything is deleted and both pools
go back to zero. Rows give the median of the rounds (3; `--quick`: 1). Writes
bench/results/autoscale.json.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from common import Row, parse_args, print_table, write_results  # noqa: E402

from surreal_kube.launch.kube import naming  # noqa: E402
from surreal_kube.launch.kube.api.client import POD, Kube  # noqa: E402

IMAGES = ["--image", "cpu=registry.test/surreal-kube/runtime-cpu:1",
          "--image", "gpu=registry.test/surreal-kube/runtime-cuda:1"]  # fmt: skip
SMALL = [
    arg
    for c in ("agent", "eval", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")
    for arg in ("--set", f"resources.{c}.cpu=100m", "--set", f"resources.{c}.memory=128Mi")
]
LEARNER = {"cpu": "2", "memory": "4Gi"}
"""The learner's requests (the spec's default), the reference pod's too."""


def say(message: str) -> None:
    print(f"[autoscale] {message}", flush=True)


def profile(workdir: Path, pools: Any) -> Path:
    """The profile a GKE user keeps: the pools at zero, their maxima and machine shapes."""
    declared = [p.declared() for p in pools]
    path = workdir / "profile.yaml"
    path.write_text(yaml.safe_dump({"experimentVolume": {"kind": "emptyDir"}, "pools": declared}))
    return path


def reference_pod(gpu_taint: dict[str, str], pool_label: str) -> dict[str, Any]:
    """A GPU pod as a GKE user writes one: the pool's selector, GKE's GPU toleration."""
    resources = {**LEARNER, "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "learner", "labels": {"bench": "reference"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
            "nodeSelector": {pool_label: "gpu-pool"},
            "tolerations": [{**gpu_taint, "operator": "Equal"}],
        },
    }


def watch_learner(
    kube: Kube, labels: str | dict[str, str], started: float, timeout: float = 300
) -> tuple[float, float]:
    """Seconds from `started` until a pod matching `labels` is bound, and until it is Running."""
    bound = running = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running is None:
        for pod in kube.list(POD, labels=labels):
            now = time.monotonic() - started
            if bound is None and pod["spec"].get("nodeName"):
                bound = now
            if pod["status"].get("phase") == "Running":
                running = now
                bound = bound if bound is not None else now
        time.sleep(0.1)
    if bound is None or running is None:
        raise RuntimeError(f"no pod {labels} Running after {timeout:.0f}s")
    return bound, running


def wait(what: str, done: Any, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.5)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def measure(
    cp: Any, who: str, prefix: str, prof: Path, env: dict[str, str]
) -> tuple[tuple[float, float, float], str]:
    """One run of `who` in a new namespace `<prefix>-<uuid8>`: (seconds until the command
    returned (the CLI's pre-flight and apply; the reference's POST), until scheduled, until
    Running), and the namespace."""
    from tests.cluster import controlplane
    from tests.cluster.fixtures import KubeCluster

    ns = KubeCluster(cp, owned=False).create_namespace(prefix)  # waits for its ServiceAccount
    with Kube(kubeconfig=cp.kubeconfig, namespace=ns) as kube:
        started = time.monotonic()
        labels: str | dict[str, str]
        if who == "reference":
            pod = reference_pod(controlplane.GPU_TAINT, controlplane.NODEPOOL_LABEL)
            cp.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
            labels = "bench=reference"
        else:
            run = subprocess.run(
                [sys.executable, "-m", "surreal_kube.cli.main", "create", "exp-gpu", "-n", ns,
                 "--no-wait", "--profile", str(prof), *IMAGES, *SMALL,
                 "--set", "resources.learner.gpu=1"],
                capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
            )  # fmt: skip
            if run.returncode != 0:
                raise SystemExit(f"create failed:\n{run.stderr}")
            labels = naming.selector_labels("exp-gpu", "learner")
        returned = time.monotonic() - started
        return (returned, *watch_learner(kube, labels, started)), ns


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    from tests.cluster import addons, controlplane
    from tests.cluster.controlplane import ControlPlane

    rounds = 1 if args.quick else 3
    bin_dir = controlplane.built_bin_dir()
    addon_dir = addons.addon_bin_dir("karpenter")
    if bin_dir is None or addon_dir is None:
        raise SystemExit("build the control plane and its add-ons first: make cluster-addons")
    times: dict[str, list[tuple[float, float, float]]] = {"ours": [], "reference": []}
    with tempfile.TemporaryDirectory(prefix="bench-autoscale-") as tmp:
        cp = ControlPlane(bin_dir=bin_dir, pools=[])
        cp.start()
        try:
            scaler = addons.Autoscaler(cp, bin_dir=addon_dir).start()
            try:
                prof = profile(Path(tmp), addons.DEFAULT_SCALED_POOLS)
                env = {**os.environ, **cp.env()}
                env.pop("SURREAL_KUBE_DEBUG", None)
                for i in range(rounds):
                    for who in ("reference", "ours"):
                        took, ns = measure(cp, who, f"bench-{who}", prof, env)
                        times[who].append(took)
                        say(
                            f"round {i + 1} {who}: returned {took[0]:.2f}s, "
                            f"scheduled {took[1]:.2f}s, Running {took[2]:.2f}s"
                        )
                        cp.request("DELETE", f"/api/v1/namespaces/{ns}")
                        wait(
                            "both pools back at zero nodes",
                            lambda: (
                                not scaler.pool_nodes("gpu-pool")
                                and not scaler.pool_nodes("cpu-pool")
                            ),
                        )
            finally:
                scaler.stop()
        finally:
            cp.stop()

    def median(who: str, k: int) -> float:
        return statistics.median(t[k] for t in times[who])

    window = "Karpenter batch 1 s idle / 2 s max"
    rows = [
        Row("create command returned (CLI pre-flight + apply vs one POST)",
            median("ours", 0), median("reference", 0), "s", "lower"),
        Row(f"create to learner scheduled, GPU pool at 0 ({window}), CLI vs bare pod",
            median("ours", 1), median("reference", 1), "s", "lower"),
        Row(f"create to learner Running, GPU pool at 0 ({window}), CLI vs bare pod",
            median("ours", 2), median("reference", 2), "s", "lower"),
    ]  # fmt: skip
    print_table("autoscale", rows)
    say(f"wrote {write_results('autoscale', rows)}")


if __name__ == "__main__":
    main()
