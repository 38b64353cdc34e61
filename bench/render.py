"""Benchmark of the Kubernetes renderer and of applying a rendered experiment, in the same run.

    python bench/render.py [--quick]

- render: seconds to render an experiment with 1, 64 and 1000 agents into objects and YAML
  (`render_experiment` + `dump_objects`, what `surreal-kube render` prints; best of several runs).
  Reference: `kubectl create --dry-run=client -o yaml -f` of the same manifests, i.e. what kubectl
  needs just to read, check and print the objects we produced.
- apply: seconds from nothing to every pod Running for the 1000-agent experiment (64 with --quick)
  on the test control plane (real kube-apiserver, controllers and scheduler; kwok nodes), applied
  our way (render, then `launch.kube.lifecycle.apply.create_objects`: server-side apply, root
  first, then
  owned objects). Reference: `kubectl apply -f` of the same manifests (rendered beforehand, not
  timed), then the same wait. Each run gets a fresh namespace, emptied before the next run.

Each apply runs on a private control plane of its own (started fresh, so neither run pays for the
other's leftovers), with one large CPU pool (12 nodes x 200 pods) so that 1000 agent pods fit;
pods ask for 10m CPU and 16Mi each. Writes bench/results/render.json.
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
from surreal_kube.launch.kube.render.objects import dump_objects, render_experiment  # noqa: E402

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
    """Poll until `expected` pods are Running; on timeout say why a pending one waits.

    Lists only the pods not Running yet (a field selector), so polling 1000 pods stays cheap.
    """
    pods = kube.resource_for("v1", "Pod")
    deadline = time.monotonic() + timeout
    while True:
        waiting = kube.list(pods, namespace, fields="status.phase!=Running")
        if not waiting and len(kube.list(pods, namespace)) == expected:
            return
        if time.monotonic() > deadline:
            why = next(
                (
                    c.get("message")
                    for p in waiting
                    for c in (p.get("status") or {}).get("conditions") or []
                    if c.get("status") == "False"
                ),
                "",
            )
            raise RuntimeError(f"pods not Running after {timeout:.0f} s: {len(waiting)} {why}")
        time.sleep(0.25)


def apply_ours(kube: Any, exp: Experiment, expected: int) -> float:
    from surreal_kube.launch.kube.lifecycle.apply import create_objects

    namespace = new_namespace(kube)
    start = time.perf_counter()
    objects = render_experiment(exp, namespace, images=IMAGES, profile=PROFILE)
    create_objects(kube, objects, namespace)
    wait_running(kube, namespace, expected)
    return time.perf_counter() - start


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
        return time.perf_counter() - start


def on_fresh_cluster(run: Any) -> float:
    """Run one apply measurement on a control plane of its own (no leftovers of another run)."""
    from surreal_kube.launch.kube.api.client import Kube
    from tests.cluster.controlplane import ControlPlane

    cp = ControlPlane(pools=POOLS)
    cp.start()
    try:
        with Kube(kubeconfig=cp.kubeconfig) as kube:
            return run(cp, kube)
    finally:
        cp.stop()


def expected_pods(exp: Experiment) -> int:
    return sum(g.replicas for g in exp.topology.groups)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    repeats = 3 if args.quick else 10
    apply_agents = 64 if args.quick else 1000
    rows: list[Row] = []

    exp = experiment(apply_agents)
    expected = expected_pods(exp)

    def renders_then_apply(cp: Any, kube: Any) -> float:
        for agents in (1, 64, 1000):
            exp = experiment(agents)
            ours, text = render_seconds(exp, "bench", repeats)
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                f.write(text)
                f.flush()
                ref = kubectl_seconds(cp, Path(f.name), "bench", repeats)
            rows.append(Row(f"render {agents} agents", ours, ref, "s", "lower"))
            say(f"render {agents} agents: {ours:.3f} s, kubectl {ref:.3f} s")
        return apply_ours(kube, experiment(apply_agents), expected)

    ours = on_fresh_cluster(renders_then_apply)
    say(f"apply {apply_agents} agents (ours): {ours:.1f} s")
    ref = on_fresh_cluster(lambda cp, kube: apply_kubectl(kube, cp, exp, expected))
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
    print_table("render", rows)
    print(f"wrote {write_results('render', rows)}")


if __name__ == "__main__":
    main()
