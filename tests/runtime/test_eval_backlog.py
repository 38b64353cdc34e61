"""Evaluations that never take the agents' CPU (issue 28): snapshots taken on time, played under
SCHED_IDLE, each point standing for the parameters of its own time.

Before: the evaluator played its 5 episodes every interval at the role's priority (nice 5, above
the agents' 10), 0.15 of a core of the 2 that the agents step their environments on; a peer of
bench/learning.py evaluates snapshots after its run and pays nothing.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from surreal_kube.comm.parameters import ParameterInfo, ParameterPublisher
from surreal_kube.runtime import eval as evaluator
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.eval import (
    KEEP_NEWEST,
    Backlog,
    CpuContention,
    EvalRole,
    Snapshot,
    yield_cpu,
)


def _snap(version: int, *, final: bool = False) -> Snapshot:
    info = ParameterInfo(iteration=version, hash=f"h{version}", time=0.0, env_steps=100 * version)
    return Snapshot({}, info, taken_at=float(version), final=final)


def test_only_the_evaluation_thread_runs_under_sched_idle() -> None:
    seen: dict[str, int] = {}

    def play() -> None:
        seen["yielded"] = int(yield_cpu())
        seen["policy"] = os.sched_getscheduler(0)

    thread = threading.Thread(target=play)
    thread.start()
    thread.join()
    assert seen == {"yielded": 1, "policy": os.SCHED_IDLE}
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the loop that snapshots and beats


def test_a_full_backlog_thins_its_older_part_and_keeps_the_newest_and_the_final() -> None:
    backlog = Backlog()
    backlog.bound = KEEP_NEWEST + 6
    for v in range(KEEP_NEWEST + 6):
        backlog.put(_snap(v))
    backlog.put(_snap(99, final=True))
    kept = []
    while (snap := backlog.take(timeout=0)) is not None:
        kept.append(snap.info.iteration)
        backlog.done()
    assert len(kept) <= KEEP_NEWEST + 6 and backlog.thinned == KEEP_NEWEST + 7 - len(kept)
    assert kept == sorted(kept) and kept[0] == 0  # in order, from the first snapshot on
    assert kept[-KEEP_NEWEST:] == [*range(7, KEEP_NEWEST + 6), 99]  # the newest, the final
    assert backlog.idle


def test_the_bound_is_what_the_thread_can_play_before_the_final_wait_ends() -> None:
    backlog = Backlog()
    backlog.set_cost(2.0)  # Ant: 5 episodes, about 2 s of a core
    assert backlog.bound == int(evaluator.DRAIN_SECONDS / 2.0)
    backlog.set_cost(60.0)  # never fewer than the summary's window
    assert backlog.bound == KEEP_NEWEST + 2
    backlog.set_cost(0.001)  # never more than MAX_BOUND
    assert backlog.bound == evaluator.MAX_BOUND


def _evaluator(
    local_run, *, episodes: int, interval: float
) -> tuple[ParameterPublisher, EvalRole, dict[str, np.ndarray]]:
    """A CartPole evaluator in this process, the real parameter server (proxy and shard
    processes) it fetches from, the learner's publisher, and a model's parameters to publish."""
    from surreal_kube.envs import env_spaces
    from surreal_kube.rl.factory import make_learner

    evals = {"episodes": episodes, "intervalSeconds": interval}
    run = local_run({"env": {"id": "gym:CartPole-v1"}, "evals": evals})
    for name in ("ps", "ps-shard-0"):
        run.start(name)
    run.wait_log("ps-shard-0", "parameter", timeout=120)
    learner_ctx = RoleContext.from_env(run.env("learner"), role="learner")
    publisher = ParameterPublisher(learner_ctx.bind("parameter-publish"))
    role = EvalRole(RoleContext.from_env(run.env("evals-0"), role="eval"))
    learner = make_learner(learner_ctx.spec, *env_spaces(learner_ctx.spec.env), device="cpu")
    return publisher, role, learner.parameters()


@pytest.mark.slow
def test_snapshots_taken_while_the_evaluator_plays_are_each_played_later(local_run) -> None:
    """The evaluation thread is held inside its first evaluation while the learner publishes
    four versions: each is snapshotted on time, played after, in order, stamped with its own
    version and env steps; the final request plays what waits and then the newest."""
    publisher, role, params = _evaluator(local_run, episodes=2, interval=0.3)
    release, policies = threading.Event(), []
    load = role.actor.load_parameters

    def held_load(p: dict[str, np.ndarray]) -> None:
        policies.append(os.sched_getscheduler(0))
        release.wait(60)
        load(p)

    role.actor.load_parameters = held_load  # type: ignore[method-assign]
    thread = threading.Thread(target=role.run)
    try:
        publisher.publish(params, 1, env_steps=100)
        thread.start()
        deadline = time.monotonic() + 60
        while not policies and time.monotonic() < deadline:
            time.sleep(0.05)
        assert policies, "the evaluation thread never took a snapshot"
        for version in (2, 3, 4, 5, 6):
            changed = {k: v + version / 100 for k, v in params.items()}  # a hash of its own
            publisher.publish(changed, version, env_steps=100 * version)
            while version not in role.backlog.versions() and time.monotonic() < deadline:
                time.sleep(0.05)  # the loop snapshots on time, though nothing is played
        assert role.evaluations == 0 and {2, 3, 4, 5, 6} <= set(role.backlog.versions())
        release.set()
        role.final.set()
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        release.set()
        role.stop.set("test over")
        thread.join(timeout=10)
        role.close()
        publisher.close()
    recent = role.progress.data["recent_evaluations"]
    versions = [r["param_version"] for r in recent]
    assert versions == sorted(versions) and {1, 2, 3, 4, 5, 6} <= set(versions)
    assert all(r["param_env_steps"] == 100 * r["param_version"] for r in recent)
    assert [r["taken_at"] for r in recent] == sorted(r["taken_at"] for r in recent)
    assert recent[-1]["final"] and recent[-1]["param_version"] == 6
    assert set(policies) == {os.SCHED_IDLE}
    assert role.progress.data["evaluations"] == len(recent)


def test_contention_is_the_share_of_a_window_some_task_waited_for_a_cpu(tmp_path, monkeypatch):
    pressure = tmp_path / "cpu"
    monkeypatch.setattr(CpuContention, "PATH", pressure)

    def write(total_us: int) -> None:
        pressure.write_text(
            f"some avg10=0.00 avg60=0.00 avg300=0.00 total={total_us}\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        )

    write(1_000_000)
    gate = CpuContention.if_available()
    assert gate is not None
    gate.window = 0.2
    assert gate.busy(lambda s: (time.sleep(s), write(1_100_000)))  # 0.1 s of 0.2 waited
    assert not gate.busy(lambda s: (time.sleep(s), write(1_100_500)))
    pressure.unlink()  # a kernel without PSI: no gate at all
    assert CpuContention.if_available() is None


class _Taken:
    """The CPUs always taken (the agents of a 2-core machine), without waiting a real window."""

    def busy(self, sleep) -> bool:
        sleep(0.05)
        return True


@pytest.mark.slow
def test_while_the_cpus_are_taken_only_the_newest_is_played_now_and_then(local_run, monkeypatch):
    """A local evaluator waits while other tasks wait for a CPU, plays the newest snapshot every
    LIVE_SECONDS, and plays everything waiting, in order, for the final evaluation."""
    monkeypatch.setattr(evaluator, "LIVE_SECONDS", 1.5)
    publisher, role, params = _evaluator(local_run, episodes=1, interval=0.2)
    role.contention = _Taken()  # type: ignore[assignment]
    thread = threading.Thread(target=role.run)
    try:
        thread.start()
        for version in range(1, 21):  # 4 s of a learner publishing every 0.2 s
            publisher.publish({k: v + version / 100 for k, v in params.items()}, version)
            time.sleep(0.2)
        live = [r["param_version"] for r in role.recent]
        assert 1 <= len(live) <= 4, live  # one every 1.5 s, not one per snapshot
        assert len(role.backlog) >= 10
        role.final.set()
        thread.join(timeout=60)
        assert not thread.is_alive() and len(role.backlog) == 0
    finally:
        role.stop.set("test over")
        thread.join(timeout=10)
        role.close()
        publisher.close()
    played = list(role.recent)
    assert played[-1]["final"] and played[-1]["param_version"] == 20
    drained = [r["param_version"] for r in played[len(live) : -1]]
    assert drained == sorted(drained) and len(drained) >= 10
    assert role.deferred_seconds > 0


@pytest.mark.slow
def test_the_first_snapshot_is_played_at_once_while_the_cpus_are_taken(local_run, monkeypatch):
    """Before: a contended evaluator's first return came LIVE_SECONDS after it started (a
    minute of `eval return -` in the live view and `status`, and no measured cost to bound the
    backlog by); after it, the contended evaluator waits as before."""
    monkeypatch.setattr(evaluator, "LIVE_SECONDS", 10**6)  # before the fix: never played
    publisher, role, params = _evaluator(local_run, episodes=1, interval=0.2)
    role.contention = _Taken()  # type: ignore[assignment]
    thread = threading.Thread(target=role.run)
    try:
        thread.start()
        publisher.publish(params, 1)
        deadline = time.monotonic() + 120
        while not role.recent:
            assert time.monotonic() < deadline, "no evaluation while the CPUs were taken"
            time.sleep(0.1)
        for version in range(2, 6):
            publisher.publish({k: v + version / 100 for k, v in params.items()}, version)
            time.sleep(0.3)
        assert [r["param_version"] for r in role.recent] == [1]
        assert len(role.backlog) >= 1 and role.deferred_seconds > 0
    finally:
        role.stop.set("test over")
        thread.join(timeout=10)
        role.close()
        publisher.close()


@pytest.mark.slow
def test_snapshots_waiting_before_the_first_play_are_played_oldest_first(local_run) -> None:
    """Before: the first play counted as the live one and took the newest snapshot, so where
    the first fetch outlasted the interval (a cold CI machine) and two snapshots waited, the
    older was played after the newer and the curve's points came out of order."""
    publisher, role, params = _evaluator(local_run, episodes=1, interval=60)
    try:
        for version in (1, 2):
            publisher.publish({k: v + version / 100 for k, v in params.items()}, version)
            deadline = time.monotonic() + 60
            while (snap := role.snapshot()) is None or snap.info.iteration != version:
                assert time.monotonic() < deadline, f"version {version} never fetched"
                time.sleep(0.05)
            role.backlog.put(snap)
        thread = threading.Thread(target=role.run)
        thread.start()
        deadline = time.monotonic() + 120
        while len(role.recent) < 2:
            assert time.monotonic() < deadline, "the two snapshots were not played"
            time.sleep(0.1)
        assert [r["param_version"] for r in role.recent][:2] == [1, 2]
    finally:
        role.stop.set("test over")
        if "thread" in locals():
            thread.join(timeout=10)
        role.close()
        publisher.close()
