"""A real learner process anneals its learning rate to the run's budget (issue 28 item 4).

`lrSchedule: {kind: budget}` was accepted and documented, but neither the learner role nor the
one-process trainer told PPO how much of the budget was spent: the rate held its initial value
for the whole run (TensorBoard said `ppo/budget_fraction` -1). Here the test plays replay (it
answers the learner's requests with batches whose stats say half the env-step budget is spent)
and tensorplex (it reads the scalars the learner reports).
"""

from __future__ import annotations

import time

import pytest
import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import make_socket
from surreal_kube.envs import env_spaces
from surreal_kube.rl.train import train
from surreal_kube.runtime.layout import item_layout

pytestmark = pytest.mark.slow

BATCH = 16
LR = 1e-4
SPEC = {
    "algorithm": {
        "batchSize": BATCH,
        "lrPolicy": LR,
        "lrSchedule": {"kind": "budget", "finalFraction": 0.2},
    },
    "session": {"maxEnvSteps": 640, "metrics": {"learnerIntervalSeconds": 1}},
}


def test_the_learner_role_anneals_to_the_env_steps_spent(local_run) -> None:
    run = local_run(SPEC)
    sampler = make_socket(zmq.ROUTER, bind=run.addresses["replay-sampler"].bind)
    metrics = make_socket(zmq.PULL, bind=run.addresses["tensorplex"].bind)
    try:
        learner = run.start("learner")
        spec = run.exp.spec
        items = item_layout(spec, *env_spaces(spec.env)).example(BATCH, 1)
        reported: dict[str, float] = {}
        deadline = time.monotonic() + 180
        while "ppo/budget_fraction" not in reported:
            assert learner.poll() is None, run.log_path("learner").read_text()
            assert time.monotonic() < deadline, (reported, run.log_path("learner").read_text())
            if sampler.poll(100):
                client, *frames = sampler.recv_multipart()
                request = wire.decode(frames, expect=(wire.SAMPLE,)).meta
                # items of the version the learner asks for: on-policy, none is too old
                items["param_version"][:] = items["step_version"][:] = request["version"]
                header = {"id": request["id"], "shard": 0, "n": BATCH, "stats": {"steps": 320}}
                sampler.send_multipart([client, *wire.encode(wire.BATCH, header, items)])
            while metrics.poll(0):
                meta = wire.decode(metrics.recv_multipart()).meta
                if meta.get("src") == "learner":
                    reported.update(meta["vals"])
        # half of the 640 env steps spent: 1 - (1 - 0.2) * 0.5 of the initial rate
        assert reported["ppo/budget_fraction"] == pytest.approx(0.5)
        assert reported["ppo/lr_policy"] == pytest.approx(0.6 * LR)
    finally:
        sampler.close(0)
        metrics.close(0)
    assert run.terminate("learner")[0] == 0


def test_the_one_process_trainer_anneals_to_its_budget() -> None:
    from surreal_kube.experiment.spec import ExperimentSpec

    spec = ExperimentSpec.model_validate(
        {
            "algorithm": {
                "name": "ppo",
                **SPEC["algorithm"],
                "batchSize": 4,
                "horizon": 5,
                "stride": 5,
            },
            "env": {"id": "gym:Pendulum-v1"},
            "agents": {"count": 1, "batch": 1},
            "replay": {"kind": "fifo", "capacity": 64, "startSampling": 1},
            "session": {"seed": 0, "learnerDevice": "cpu"},
        }
    )
    seen: list[tuple[int, float]] = []

    def record(env_steps: int, stats: dict[str, float]) -> bool:
        seen.append((env_steps, stats["ppo/lr_policy"]))
        return False

    train(spec, max_env_steps=400, eval_episodes=0, device="cpu", callback=record)
    assert len(seen) >= 3, seen
    for env_steps, lr in seen:  # the rate falls with the steps spent, to 0.2 of it at the end
        assert lr == pytest.approx(LR * (1 - 0.8 * min(env_steps / 400, 1.0)), rel=0.05), seen
    assert seen[-1][1] < 0.5 * LR
