"""Shards as pods of their own on the real node (issue 27 item 4): a run whose replay and
parameter shards are pods (`layout: pods`) learns to its budget and ends Succeeded.

What only running pods can show: each agent reaches every replay shard at that shard pod's own
DNS name (`<exp>-replay-shard-<i>.<exp>-replay-shard.<ns>.svc`, served by CoreDNS from the
headless Service) over CURVE, each shard registers with the broker in another pod, and the
parameter shards, pods of their own, take the learner's broadcast and serve the agents.
"""

from __future__ import annotations

import json
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


def scheduled_to(e2e: E2ECluster, pod: str) -> str:
    """The node the scheduler bound `pod` to, from its `Scheduled` event: events outlive the
    pods, which a short run releases as soon as it reaches its budget."""
    selector = f"reason=Scheduled,involvedObject.name={pod}"
    events = json.loads(e2e.kubectl("get", "events", "-o", "json", "--field-selector", selector))
    events = events["items"]
    assert events, f"no Scheduled event for {pod}"
    return events[-1]["message"].rsplit(" to ", 1)[-1]


def collected_log(e2e: E2ECluster, process: str) -> str:
    """`process`'s log as loggerplex wrote it on the experiment's volume (kept after the run,
    until `delete --delete-data`), read from the folder the test provisioner made for it."""
    volume = e2e.kubectl("get", "pvc", f"{NAME}-data", "-o", "jsonpath={.spec.volumeName}")
    folder = Path(e2e.kubectl("get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}"))
    files = sorted(folder.rglob(f"logs/{process}.log*"))
    assert files, f"no log of {process} under {folder}"
    return "".join(f.read_text(errors="replace") for f in files)


def test_a_run_with_shard_pods_learns_to_its_budget(e2e: E2ECluster, tmp_path: Path) -> None:
    spec = tmp_path / "shards.yaml"
    spec.write_text(SPEC)
    try:
        # on a busy node the run may reach its budget, and release its pods, before the slowest
        # of its 12 pods is ready: `create` then says it finished instead of waiting for them
        created = e2e.sk(
            "create", NAME, "-a", "ppo", "-e", "gym:CartPole-v1", "--num-agents", "2",
            "--max-env-steps", str(BUDGET), "-f", str(spec), "--image", f"cpu={e2e.image}",
            "--timeout", "900",
            timeout=960,
        )  # fmt: skip
        assert " is running: " in created.stderr or " finished before " in created.stderr

        def ended() -> dict | None:
            status = e2e.status(NAME)
            return status if status["phase"] in ("Succeeded", "Failed") else None

        final = wait_for("the run to end", ended, timeout=1200, every=5)
        assert final["phase"] == "Succeeded", e2e.sk("status", NAME, check=False).stdout
        for i in (0, 1):
            for group in ("replay-shard", "ps-shard"):
                assert scheduled_to(e2e, f"{NAME}-{group}-{i}") == "real-0"
            # each replay shard got the agents' experience at its own pod's name and served the
            # broker in the replay pod; each parameter shard took the learner's parameters
            assert "start condition met" in collected_log(e2e, f"replay-shard-{i}")
            assert "first parameters received" in collected_log(e2e, f"ps-shard-{i}")
    finally:
        e2e.sk(
            "delete", NAME, "--wait", "--delete-data", "--timeout", "300", timeout=360, check=False
        )
    for kind in ("pods", "statefulsets", "services"):
        left = e2e.kubectl("get", kind, "-l", f"app.kubernetes.io/instance={NAME}", "-o", "name")
        assert not left.strip(), (kind, left)
