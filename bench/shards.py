"""Benchmark of shards as pods (issue 27 item 4): 16 replay shards as pods of their own against
16 containers of one pod, each under the CPU limit our renderer gives it, in the same run.

    python bench/shards.py [--quick]      # as root: it makes cgroups (the cpu controller)

A shard's CPU is what the kubelet enforces: the CFS quota of its container's limit (period
100 ms, the cgroup `cpu` controller). For the same spec (`replay.shards: 16`, the default
resources) the renderer gives each shard, in the one-pod layout, its weighted share of the
replay pod's `resources.replay` (1 CPU over the broker and 16 shards: about 62m each) and, with
`layout: pods`, a pod of `resources.replay-shard` each (1 CPU). The limits are read from the
rendered objects, not typed here.

The real replay service runs as local processes (`ReplayBalancer`, `ReplayShard`s, DDPG
transitions, the rate limiter off), each shard process in a cgroup of its own with its
container's quota; 2 senders push experience with the agents' `ExperienceSender`, unlimited
(agents run on other nodes). Rows:

- one shard's transitions/s under each layout's limit, times 16: the service's capacity where
  the shard pods find the nodes their requests ask for (16 CPUs; the scheduler spreads them,
  `tests/launch/kube/test_shard_pods_cluster.py`), against one pod's 16 containers;
- the 16 shards at once on this machine, each in its cgroup: what one node of 2 cores gives
  either layout (the senders share those cores), so the pods' gain is bounded by this node.

Writes bench/results/shards.json.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import comm
from common import Row, parse_args, print_table, write_results

SHARDS = 16
SENDERS = 2
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
"""The cgroup v1 cpu hierarchy (cgroup v2: the unified one, `cpu.max`)."""
PERIOD_US = 100_000


def rendered_limits() -> dict[str, int]:
    """Each layout's CPU limit of one replay shard's container, in millicpu, as rendered."""
    from surreal_kube.experiment.quantity import to_millicpu
    from surreal_kube.experiment.resolve import resolve_experiment
    from surreal_kube.launch.kube.render.objects import render_experiment

    limits = {}
    for layout in ("containers", "pods"):
        exp = resolve_experiment(
            "bench", sets=[f"replay.shards={SHARDS}", f"replay.layout={layout}"]
        )
        objects = render_experiment(exp, "bench", images={"cpu": "bench", "gpu": "bench"})
        cpus = {
            c["name"]: to_millicpu(c["resources"]["limits"]["cpu"])
            for o in objects
            if o["kind"] in ("Deployment", "StatefulSet")
            for c in o["spec"]["template"]["spec"]["containers"]
        }
        limits[layout] = cpus["replay-shard-0" if layout == "containers" else "replay-shard"]
    return limits


class CpuLimit:
    """A cgroup with a CFS quota of `millicpu`, as the kubelet gives a container's CPU limit."""

    def __init__(self, millicpu: int) -> None:
        self.path = self._root() / f"surreal-bench-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        quota = millicpu * PERIOD_US // 1000
        try:
            if (self.path / "cpu.max").exists():  # cgroup v2
                (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError:
            self.path.rmdir()  # nothing half-made is left behind
            raise

    @staticmethod
    def _root() -> Path:
        if CPU_CGROUPS.is_dir():
            return CPU_CGROUPS
        unified = Path("/sys/fs/cgroup")
        if "cpu" in (unified / "cgroup.subtree_control").read_text().split():
            return unified
        raise SystemExit("bench/shards.py needs the cgroup cpu controller (run it as root)")

    def remove(self) -> None:
        for _ in range(50):  # its processes may still be exiting
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def run_limited_shard(
    limit: str, env: dict[str, str], ready: Any, window: Any, stop: Any, out: Any
) -> None:
    """A replay shard inside its container's CPU limit (the cgroup at `limit`)."""
    (Path(limit) / "cgroup.procs").write_text(str(os.getpid()))
    comm.run_shard(env, ready, window, stop, out)


@contextmanager
def cpu_limits(millicpu: int, count: int) -> Iterator[list[CpuLimit]]:
    """`count` cgroups of `millicpu` each, removed at the end (those made, if one fails)."""
    limits: list[CpuLimit] = []
    try:
        for _ in range(count):
            limits.append(CpuLimit(millicpu))
        yield limits
    finally:
        for limit in limits:
            limit.remove()


def experience(mpc: Any, shards: int, millicpu: int, seconds: float) -> float:
    """Transitions/s into `shards` shards, each limited to `millicpu`."""
    from surreal_kube.experiment.topology import collector, endpoint

    window, stop, out, ready = mpc.Event(), mpc.Event(), mpc.Queue(), mpc.Queue()
    spec = {
        "replay": {
            "shards": shards,
            "kind": "uniform",
            "capacity": 200_000,
            "samplesPerInsert": 0,
        }
    }
    procs: list[Any] = []
    with tempfile.TemporaryDirectory() as tmp, cpu_limits(millicpu, shards) as limits:
        envs = comm.experiment_envs(Path(tmp), spec, curve=True)
        keys = comm.key_file(envs)
        lb_stop = mpc.Event()
        procs.append(comm._spawn(mpc, comm.run_balancer, envs["replay"], lb_stop))
        for i, limit in enumerate(limits):
            env = envs[f"replay-shard-{i}"]
            procs.append(
                comm._spawn(mpc, run_limited_shard, str(limit.path), env, ready, window, stop, out)
            )
        if not all(ready.get(timeout=120) for _ in range(shards)):
            raise RuntimeError("a replay shard could not reach the load balancer")
        agent = envs["agents-0"]
        addrs = [agent[endpoint(collector(i)).addr_var] for i in range(shards)]
        started = mpc.Queue()
        senders = [
            comm._spawn(mpc, comm.run_sender, addrs, False, started, stop, s, keys)
            for s in range(SENDERS)
        ]
        for _ in range(SENDERS):
            started.get(timeout=120)
        time.sleep(1.0)  # every sender connected to every shard, the quotas in their stride
        window.set()
        time.sleep(seconds)
        stop.set()
        results = [out.get(timeout=60) for _ in range(shards)]
        comm._join(senders)
        lb_stop.set()
        comm._join(procs)
    return sum(r[0] for r in results) / max(r[1] for r in results)


def main() -> None:
    args = parse_args(__doc__)
    seconds, repeats = (3.0, 1) if args.quick else (8.0, 3)
    limits = rendered_limits()
    mpc = mp.get_context("spawn")
    best: dict[tuple[str, int], float] = {}
    for _ in range(repeats):  # interleaved: both layouts see the same machine
        for layout, millicpu in limits.items():
            for shards in (1, SHARDS):
                rate = experience(mpc, shards, millicpu, seconds)
                best[(layout, shards)] = max(best.get((layout, shards), 0.0), rate)
    pods, containers = limits["pods"], limits["containers"]
    rows = [
        Row(
            f"replay capacity, {SHARDS} shards: pods ({pods}m each) vs containers of one pod "
            f"({containers}m each), one shard measured x{SHARDS}",
            SHARDS * best[("pods", 1)],
            SHARDS * best[("containers", 1)],
            "transitions/s",
            "higher",
        ),
        Row(
            f"replay, {SHARDS} shards at once on this machine: pods vs containers of one pod "
            "(the node's cores bound both)",
            best[("pods", SHARDS)],
            best[("containers", SHARDS)],
            "transitions/s",
            "higher",
        ),
    ]
    print_table("shards", rows)
    write_results("shards", rows)


if __name__ == "__main__":
    main()
