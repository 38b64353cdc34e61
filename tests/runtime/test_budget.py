"""The env-step budget is kept by the agents themselves (issue 15 item 3).

Each agent takes its share of `session.maxEnvSteps` and stops stepping there, so the total is
exact whatever the reporting period, and holds on Kubernetes where no local supervisor counts.
"""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import make_socket
from surreal_kube.runtime.context import env_step_share
from surreal_kube.runtime.status import read_status

BUDGET = 301
SPEC = {
    "env": {"id": "gym:CartPole-v1"},
    "agents": {"count": 3, "batch": 1, "envsPerAgent": 2, "fetchInterval": 50},
    "evals": {"count": 1},
    "replay": {"startSampling": 16},
    "algorithm": {"batchSize": 16, "epochsPolicy": 1, "epochsBaseline": 1},
    "session": {"maxEnvSteps": BUDGET},
}


def test_shares_add_up_to_the_budget() -> None:
    for total in (1, 2, 5000, 5001, 10_693):
        for count in (1, 2, 3, 7, 64):
            shares = [env_step_share(total, count, i) for i in range(count)]
            assert sum(shares) == total
            assert max(shares) - min(shares) <= 1
    assert env_step_share(None, 4, 0) is None


def _status(run, process: str) -> dict:
    return read_status(run.dir / "status" / f"{process}.json") or {}


def _wait(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_agents_stop_at_their_share_and_keep_it_across_restarts(local_run) -> None:
    run = local_run(SPEC)
    agents = [f"agents-{i}" for i in range(3)]
    # tensorplex's socket, read by the test: on a cluster what the agents send there ends the run
    sink = make_socket(zmq.PULL, bind=run.addresses["tensorplex"].bind)
    for name in ("replay", "replay-shard-0", "ps", "ps-shard-0", "learner", *agents):
        run.start(name)
    _wait(
        lambda: all(_status(run, a).get("state") == "done" for a in agents),
        180,
        "every agent to take its share",
    )
    said: dict[str, dict[str, float]] = {}

    def every_agent_said_done() -> bool:
        while sink.poll(0):
            meta = wire.decode(sink.recv_multipart()).meta
            if meta.get("grp") == "agents" and "agent/env_steps" in meta["vals"]:
                said[meta["src"]] = meta["vals"]
        return all(said.get(a, {}).get("agent/budget_done") == 1.0 for a in agents)

    _wait(every_agent_said_done, 60, "every agent to say it took its share")
    sink.close(0)
    assert {a: said[a]["agent/env_steps"] for a in agents} == {
        "agents-0": 101.0, "agents-1": 100.0, "agents-2": 100.0,
    }  # fmt: skip
    per_agent = {}
    for name in agents:
        status = _status(run, name)
        assert status["message"] == "took its share of session.maxEnvSteps"
        per_agent.update(status["env_steps_per_agent"])
    assert per_agent == {"0": 101, "1": 100, "2": 100}
    assert sum(per_agent.values()) == BUDGET

    # a restarted agent reads what it took before and takes no more
    code, _ = run.terminate("agents-0", timeout=60)  # a loaded 2-core machine exits slowly
    assert code == 0
    run.start("agents-0")
    _wait(lambda: _status(run, "agents-0").get("restarts") == 1, 120, "agents-0 restarted")
    _wait(lambda: _status(run, "agents-0").get("state") == "done", 120, "agents-0 done again")
    assert _status(run, "agents-0")["env_steps_per_agent"] == {"0": 101}
    for name in list(run.procs):
        code, _ = run.terminate(name, timeout=60)
        assert code == 0, name


@pytest.mark.slow
def test_an_agent_done_on_a_full_disk_says_so_once_space_is_back(local_run, monkeypatch) -> None:
    """Before: an agent wrote `done` (and its final step counts) into its progress file once;
    a full disk lost that write, and the local supervisor, which ends the run from those files,
    never saw the budget reached: the run idled until deleted, long after space was back."""
    from surreal_kube.comm.parameters import ParameterPublisher
    from surreal_kube.envs import env_spaces
    from surreal_kube.rl.factory import make_learner
    from surreal_kube.runtime import status
    from surreal_kube.runtime.agent import AgentsRole
    from surreal_kube.runtime.context import RoleContext

    spec = {**SPEC, "agents": {**SPEC["agents"], "count": 1}, "session": {"maxEnvSteps": 40}}
    spec["session"]["metrics"] = {"agentIntervalSeconds": 0.2}
    run = local_run(spec)
    for name in ("replay", "replay-shard-0", "ps", "ps-shard-0"):
        run.start(name)
    run.wait_log("ps-shard-0", "parameter", timeout=120)
    learner_ctx = RoleContext.from_env(run.env("learner"), role="learner")
    publisher = ParameterPublisher(learner_ctx.bind("parameter-publish"))
    learner = make_learner(learner_ctx.spec, *env_spaces(learner_ctx.spec.env), device="cpu")
    publisher.publish(learner.parameters(), 1)

    full = threading.Event()
    full.set()
    real_write = status.write_atomic

    def write_atomic(path, data) -> None:
        if full.is_set():
            raise OSError(28, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(status, "write_atomic", write_atomic)
    role = AgentsRole(RoleContext.from_env(run.env("agents-0"), role="agents"))
    thread = threading.Thread(target=role.run)
    try:
        thread.start()
        _wait(role.budget_spent, 120, "the agent to take its share on the full disk")
        time.sleep(0.5)  # a few idle rounds on the full disk
        assert _status(run, "agents-0") == {}
        full.clear()  # space is back
        _wait(lambda: _status(run, "agents-0").get("state") == "done", 30, "`done` on disk")
        assert _status(run, "agents-0")["env_steps_per_agent"] == {"0": 40}
    finally:
        role.stop.set("test over")
        thread.join(timeout=10)
        role.close()
        publisher.close()
