"""Shards as pods of their own on the real node (issue 27 item 4): a run whose replay and
parameter shards are pods (`layout: pods`) learns to its budget and ends Succeeded.

What only running pods can show: each agent reaches every replay shard at that shard pod's own
DNS name (`<exp>-replay-shard-<i>.<exp>-replay-shard.<ns>.svc`, served by CoreDNS from the
headless Service) over CURVE, each shard registers with the broker in another pod, and the
parameter shards, pods of their own, take the learner's broadcast and serve the agents.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.support import MARKS, E2ECluster, wait_for

pytestmark = MARKS

NAME = "exp-shards"
SPEC = """\
# every pod on the real node's 2 cores: 2 replay shards and 2 parameter shards of their own
spec:
  replay: {shards: 2, layout: pods}
  ps: {shards: 2, layout: pods}
  evals: {count: 0}
  resources:
    learner: {cpu: 500m, memory: 2Gi}
    agent: {cpu: 150m, memory: 1Gi}
    replay: {cpu: 100m, memory: 512Mi}
    replay-shard: {cpu: 150m, memory: 1Gi}
    ps: {cpu: 100m, memory: 512Mi}
    ps-shard: {cpu: 100m, memory: 512Mi}
    tensorplex: {cpu: 150m, memory: 512Mi}
    loggerplex: {cpu: 50m, memory: 512Mi}
    tensorboard: {cpu: 50m, memory: 768Mi}
"""
BUDGET = 30_000


def test_a_run_with_shard_pods_learns_to_its_budget(e2e: E2ECluster, tmp_path: Path) -> None:
    spec = tmp_path / "shards.yaml"
    spec.write_text(SPEC)
    e2e.sk(
        "create", NAME, "-a", "ppo", "-e", "gym:CartPole-v1", "--num-agents", "2",
        "--max-env-steps", str(BUDGET), "-f", str(spec), "--image", f"cpu={e2e.image}",
        "--timeout", "900",
        timeout=960,
    )  # fmt: skip
    try:
        pods = e2e.status(NAME)["processes"]
        for i in (0, 1):
            for group in ("replay-shard", "ps-shard"):
                assert pods[f"{NAME}-{group}-{i}"]["node"] == "real-0", pods

        # each replay shard got the agents' experience at its own pod's name and serves the
        # broker in the replay pod; each parameter shard took the learner's parameters
        for i in (0, 1):
            wait_for(
                f"replay-shard-{i} serving samples",
                lambda i=i: (
                    "start condition met" in e2e.sk("logs", NAME, f"replay-shard/{i}").stdout
                ),
                timeout=600,
            )
            wait_for(
                f"ps-shard-{i} holding the learner's parameters",
                lambda i=i: (
                    "first parameters received" in e2e.sk("logs", NAME, f"ps-shard/{i}").stdout
                ),
                timeout=300,
            )

        def ended() -> dict | None:
            status = e2e.status(NAME)
            return status if status["phase"] in ("Succeeded", "Failed") else None

        final = wait_for("the run to end", ended, timeout=1200, every=5)
        assert final["phase"] == "Succeeded", e2e.sk("status", NAME, check=False).stdout
    finally:
        e2e.sk(
            "delete", NAME, "--wait", "--delete-data", "--timeout", "300", timeout=360, check=False
        )
    for kind in ("pods", "statefulsets", "services"):
        left = e2e.kubectl("get", kind, "-l", f"app.kubernetes.io/instance={NAME}", "-o", "name")
        assert not left.strip(), (kind, left)
