"""Benchmark of the Kubernetes renderer and of applying a rendered experiment, in the same run.

    python bench/render.py [--quick]

- render: seconds to render an experiment with 1, 64 and 1000 agents into objects and YAML
  (`render_experiment` + `dump_objects`, what `surreal-kube render` prints; best of several runs).
  Reference: `kubectl create --dry-run=client -o yaml -f` of the same manifests, i.e. what kubectl
  needs just to read, check and print the objects we produced.
- apply: seconds from nothing to every pod Running for the 1000-agent experiment (64 with --quick)
  on the test control plane (real kube-apiserver, controllers and scheduler; kwok nodes), applied
  our way (render, then `launch.kube.apply.create_objects`: server-side apply, root first, then
  owned objects). Reference: `kubectl apply -f` of the same manifests (rendered beforehand, not
  timed), then the same wait. Each run gets a fresh namespace, emptied before the next run.

A private control plane is started with one large CPU pool (12 nodes x 200 pods), so that 1000
agent pods fit; pods ask for 10m CPU and 16Mi each. Writes bench/results/render.json.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import Row, parse_args, print_table, write_results  # noqa: E402

from surreal_kube.experiment.resolve import resolve_experiment  # noqa: E402
from surreal_kube.experiment.spec import Experiment  # noqa: E402
from surreal_kube.launch.kube.profile import profile_from_dict  # noqa: E402
from surreal_kube.launch.kube.render import dump_objects, render_experiment  # noqa: E402

COMPONENTS = ("learner", "agent", "eval", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")
TINY = [f"resources.{c}.cpu=10m" for c in COMPONENTS] + [
    f"resources.{c}.memory=16Mi" for c in COMPONENTS
]
IMAGES = {"cpu": "surreal-kube/runtime-cpu:0123456789abcdef", "gpu": "surreal-kube/runtime-cuda:0"}
POOLS = [{"name": "cpu-pool", "count": 12, "cpu": "64", "memory": "256Gi", "pods": 200}]
PROFILE = profile_from_dict(
    {"pools": POOLS, "experimentVolume": {"kind": "hostPath", "path": "/tmp/surreal-bench"}}
)
"""No volume provisioner there: the experiment folder is a node path (kwok mounts nothing)."""


def experiment(agents: int) -> Experiment:
    return resolve_experiment(
        "bench-render", sets=[f"agents.count={agents}", "evals.count=1", "replay.shards=2", *TINY]
    )


def render_seconds(exp: Experiment, namespace: str, repeats: int) -> tuple[float, str]:
    """Best wall time of render + dump, and the YAML."""
    best = float("inf")
    text = dump_objects(render_experiment(exp, namespace, images=IMAGES, profile=PROFILE))  # warm
    for _ in range(repeats):
        start = time.perf_counter()
        text = dump_objects(render_experiment(exp, namespace, images=IMAGES, profile=PROFILE))
        best = min(best, time.perf_counter() - start)
    return best, text


def kubectl_seconds(cp: Any, manifest: Path, namespace: str, repeats: int) -> float:
    """Best wall time of `kubectl create --dry-run=client -o yaml -f manifest`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [
                str(cp.kubectl),
                "create",
                "--dry-run=client",
                "-o",
                "yaml",
                "-n",
                namespace,
                "-f",
                str(manifest),
            ],
            env=cp.env(),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        best = min(best, time.perf_counter() - start)
    return best


def new_namespace(kube: Any) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while kube.get_or_none(kube.resource_for("v1", "ServiceAccount"), "default", name) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespace {name} has no default ServiceAccount")
        time.sleep(0.1)
    return name


def wait_running(kube: Any, namespace: str, expected: int, timeout: float = 300.0) -> None:
    """Poll until `expected` pods are Running; on timeout say why the first pending one waits."""
    pods = kube.resource_for("v1", "Pod")
    deadline = time.monotonic() + timeout
    while True:
        items = kube.list(pods, namespace)
        running = sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")
        if running == expected and len(items) == expected:
            return
        if time.monotonic() > deadline:
            why = next(
                (
                    c.get("message")
                    for p in items
                    for c in (p.get("status") or {}).get("conditions") or []
                    if c.get("status") == "False"
                ),
                "",
            )
            raise RuntimeError(
                f"only {running}/{expected} pods Running after {timeout:.0f} s {why}"
            )
        time.sleep(0.25)


def wait_empty(kube: Any, namespace: str, timeout: float = 600.0) -> None:
    """Delete the namespace and wait until its pods are gone (they hold node slots)."""
    kube.delete(kube.resource_for("v1", "Namespace"), namespace)
    pods = kube.resource_for("v1", "Pod")
    deadline = time.monotonic() + timeout
    while kube.list(pods, namespace) and time.monotonic() < deadline:
        time.sleep(0.5)


def apply_ours(kube: Any, exp: Experiment, expected: int) -> float:
    from surreal_kube.launch.kube.apply import create_objects

    namespace = new_namespace(kube)
    start = time.perf_counter()
    objects = render_experiment(exp, namespace, images=IMAGES, profile=PROFILE)
    create_objects(kube, objects, namespace)
    wait_running(kube, namespace, expected)
    seconds = time.perf_counter() - start
    wait_empty(kube, namespace)
    return seconds


def apply_kubectl(kube: Any, cp: Any, exp: Experiment, expected: int) -> float:
    namespace = new_namespace(kube)
    text = dump_objects(render_experiment(exp, namespace, images=IMAGES, profile=PROFILE))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        start = time.perf_counter()
        subprocess.run(
            [str(cp.kubectl), "apply", "-f", f.name],
            env=cp.env(),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wait_running(kube, namespace, expected)
        seconds = time.perf_counter() - start
    wait_empty(kube, namespace)
    return seconds


def expected_pods(exp: Experiment) -> int:
    from surreal_kube.experiment.resolve import experiment_topology

    return sum(g.replicas for g in experiment_topology(exp).groups)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    from surreal_kube.launch.kube.client import Kube
    from tests.cluster.controlplane import ControlPlane

    repeats = 3 if args.quick else 10
    apply_agents = 64 if args.quick else 1000
    rows: list[Row] = []
    cp = ControlPlane(pools=POOLS)
    cp.start()
    say(f"control plane up with {POOLS[0]['count']} kwok nodes")
    try:
        with Kube(kubeconfig=cp.kubeconfig) as kube:
            for agents in (1, 64, 1000):
                exp = experiment(agents)
                ours, text = render_seconds(exp, "bench", repeats)
                with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                    f.write(text)
                    f.flush()
                    ref = kubectl_seconds(cp, Path(f.name), "bench", repeats)
                rows.append(Row(f"render {agents} agents", ours, ref, "s", "lower"))
                say(f"render {agents} agents: {ours:.3f} s, kubectl {ref:.3f} s")
            exp = experiment(apply_agents)
            expected = expected_pods(exp)
            ours = apply_ours(kube, exp, expected)
            say(f"apply {apply_agents} agents (ours): {ours:.1f} s")
            ref = apply_kubectl(kube, cp, exp, expected)
            say(f"apply {apply_agents} agents (kubectl apply): {ref:.1f} s")
            rows.append(
                Row(
                    f"apply {apply_agents} agents until {expected} pods Running",
                    ours,
                    ref,
                    "s",
                    "lower",
                )
            )
    finally:
        cp.stop()
    print_table("render", rows)
    print(f"wrote {write_results('render', rows)}")


if __name__ == "__main__":
    main()
