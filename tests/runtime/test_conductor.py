"""The conductor's pure parts (runtime/conductor.py): the budget, the results ConfigMap's size,
what a restarted tensorplex keeps. The whole end runs against the real API server in
tests/launch/kube/test_run_end_cluster.py.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from surreal_kube.experiment import progress
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.runtime import conductor
from surreal_kube.runtime.reporter import ProgressTracker
from surreal_kube.session import results as shared


def test_the_record_carries_the_reason_and_start_time_and_survives_a_restart() -> None:
    rec = progress.Record(state="finished", reason="reached 60 s of wall time", started_at=100.0)
    assert progress.parse(rec.to_json()) == rec
    assert progress.from_mapping({"reason": "x" * 1000}).reason.endswith("...")  # type: ignore[union-attr]
    t = ProgressTracker()
    t.restore(progress.Record(state="running", started_at=123.0, iteration=7), now=999.0)
    assert (t.started_at, t.state, t.iteration) == (123.0, "starting", 7)
    t = ProgressTracker()
    t.restore(None, now=999.0)  # the first tensorplex: the experiment starts now
    assert t.started_at == 999.0
    t = ProgressTracker()
    t.restore(rec, now=999.0)
    assert (t.state, t.reason, t.started_at) == ("finished", rec.reason, 100.0)
    assert t.finished_before  # the conductor only releases again, it writes no new results


def conductor_for(sets: list[str], tracker: ProgressTracker, tmp_path: Any) -> Any:
    exp = resolve_experiment("exp-c", sets=sets)
    return conductor.Conductor(
        exp,
        tracker,
        api=None,
        results_dir=tmp_path,
        results_configmap=None,
        workloads=[],  # type: ignore[arg-type]
    )


def test_the_budget_is_the_agents_steps_their_done_flags_or_the_time(tmp_path: Any) -> None:
    t = ProgressTracker()
    t.restore(None, now=time.time())
    c = conductor_for(["agents.count=4", "agents.batch=2", "session.maxEnvSteps=1000"], t, tmp_path)
    t.observe("learner", None, None, 990, 1.0, {"learner/iteration": 3.0})
    assert c.budget_reached() is None  # the learner's figure lags: not yet
    t.observe("agents-0", "agents", 0, 990, 1.0, {"agent/env_steps": 500.0})
    t.observe("agents-1", "agents", 1, 990, 1.0, {"agent/env_steps": 499.0})
    assert c.budget_reached() is None
    t.observe("agents-1", "agents", 1, 990, 2.0, {"agent/env_steps": 500.0})
    assert c.budget_reached() == "reached 1000 env steps"
    assert t.record().env_steps == 1000
    # every agent process done is the budget too (their last steps may still be on the wire)
    t2 = ProgressTracker()
    c2 = conductor_for(["agents.count=2", "session.maxEnvSteps=1000"], t2, tmp_path)
    t2.observe("agents-0", "agents", 0, 0, 1.0, {"agent/budget_done": 1.0})
    assert c2.budget_reached() is None
    t2.observe("agents-1", "agents", 1, 0, 1.0, {"agent/budget_done": 1.0})
    assert c2.budget_reached() == "reached 1000 env steps"
    # the time budget counts from the record's start time
    t3 = ProgressTracker()
    t3.restore(progress.Record(started_at=time.time() - 61), now=time.time())
    assert conductor_for(["session.maxTimeSeconds=60"], t3, tmp_path).budget_reached() == (
        "reached 60 s of wall time"
    )
    assert conductor_for([], t3, tmp_path).budget_reached() is None  # no budget: never


def test_the_results_configmap_stays_under_its_limit_keeping_the_newest_points() -> None:
    point = '{"env_steps": 1, "eval_return": 1.0}\n'
    files = {
        shared.SUMMARY: b'{"phase": "Succeeded"}\n',
        shared.PICTURE: b"\x89PNG" + bytes(300_000),
        shared.CURVE: "".join(point.replace("1,", f"{i},", 1) for i in range(30_000)).encode(),
    }
    body = conductor.configmap_body(files)
    size = sum(len(v) for part in body.values() for v in part.values())
    assert size <= conductor.CONFIGMAP_LIMIT
    kept = shared.parse_curve(body["data"][shared.CURVE])
    assert kept and kept[-1]["env_steps"] == 29_999
    assert kept[0]["env_steps"] == 30_000 - len(kept)  # the newest, contiguous
    assert base64.b64decode(body["binaryData"][shared.PICTURE]) == files[shared.PICTURE]
    small = conductor.configmap_body({**files, shared.CURVE: point.encode()})
    assert small["data"][shared.CURVE] == point


def test_the_final_evaluation_waits_for_new_parameters_then_gives_up_with_what_it_has(
    tmp_path: Any, caplog: Any
) -> None:
    t = ProgressTracker()
    t.restore(progress.Record(started_at=time.time() - 61), now=time.time())
    t.observe("learner", None, None, 500, 1.0, {"learner/published_iteration": 9.0})
    c = conductor_for(["session.maxTimeSeconds=60", "evals.count=1"], t, tmp_path)
    c.step()
    assert c.phase == conductor.FINAL_EVAL and c.wanted_version == 9
    # an evaluation of older parameters arriving now is a point of the curve, not the final one
    c.observe("evals-0", "evals", 0, 510, {conductor.EVAL_RETURN: 5.0, conductor.EVAL_VERSION: 8})
    assert not c._final_evaluation_done() and c.final is None
    # past one interval and FINAL_EVAL_TIMEOUT: the run ends with what it has, and says so
    c.budget_at = time.monotonic() - c.final_eval_timeout() - 1
    with caplog.at_level("WARNING", logger="surreal_kube.runtime.conductor"):
        assert c._final_evaluation_done()
    assert c.phase == conductor.WRITING and c.final is None
    assert any("no final evaluation after" in r.getMessage() for r in caplog.records)
    assert [p["param_version"] for p in c.points] == [8]
    # with a fresh one in time, that one is the final evaluation
    c2 = conductor_for(["session.maxTimeSeconds=60", "evals.count=1"], t, tmp_path / "c2")
    c2.step()
    c2.observe("evals-0", "evals", 0, 520, {conductor.EVAL_RETURN: 7.0, conductor.EVAL_VERSION: 9})
    assert c2._final_evaluation_done() and c2.final["eval_return"] == 7.0  # type: ignore[index]


def test_a_replaced_agent_pod_counting_from_zero_adds_to_what_its_predecessor_made() -> None:
    """Its status file lives in an emptyDir: before, its steps were ignored until they passed the
    old pod's, and the step budget overshot by that much."""
    t = ProgressTracker()
    t.observe("agents-0", "agents", 0, 0, 1.0, {"agent/env_steps": 40_000.0})
    t.observe("agents-1", "agents", 1, 0, 1.0, {"agent/env_steps": 40_000.0})
    t.observe("agents-0", "agents", 0, 0, 2.0, {"agent/env_steps": 39_000.0})  # late: not new
    assert t.agents()[0] == 80_000
    t.observe("agents-0", "agents", 0, 0, 3.0, {"agent/env_steps": 1_000.0})  # a new pod
    assert t.agents()[0] == 81_000
    t.observe("agents-0", "agents", 0, 0, 4.0, {"agent/env_steps": 5_000.0})
    assert t.agents()[0] == 85_000 and t.env_steps == 85_000


def test_the_time_budget_counts_run_time_not_the_wall_clock(tmp_path: Any, monkeypatch) -> None:
    t = ProgressTracker()
    t.restore(None, now=time.time())
    c = conductor_for(["session.maxTimeSeconds=60"], t, tmp_path)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86_400.0)  # NTP steps the clock a day
    assert c.budget_reached() is None  # before: "reached 60 s of wall time" at once
    record = t.record()
    assert record.elapsed_seconds is not None and record.elapsed_seconds < 86_400  # not the step
    monkeypatch.undo()


def test_a_restarted_tensorplex_goes_on_counting_the_run_time(tmp_path: Any) -> None:
    now = time.time()
    # the previous tensorplex had counted 50 s and wrote its record 2 s ago
    before = progress.Record(started_at=now - 3_600, elapsed_seconds=50.0, updated_at=now - 2)
    t = ProgressTracker()
    t.restore(progress.parse(before.to_json()), now=now)
    assert t._elapsed_before == 52.0  # what it counts on from
    assert conductor_for(["session.maxTimeSeconds=60"], t, tmp_path).budget_reached() is None
    assert conductor_for(["session.maxTimeSeconds=52"], t, tmp_path).budget_reached() == (
        "reached 52 s of wall time"
    )
    # a clock stepped a day forward while tensorplex restarted adds RESTART_GAP_MAX at most
    stepped = progress.Record(elapsed_seconds=50.0, updated_at=now - 86_400)
    t2 = ProgressTracker()
    t2.restore(stepped, now=now)
    from surreal_kube.runtime.reporter import RESTART_GAP_MAX

    assert t2._elapsed_before == 50.0 + RESTART_GAP_MAX
    # and one stepped back counts no gap at all (nor less than what was counted)
    t3 = ProgressTracker()
    t3.restore(progress.Record(elapsed_seconds=50.0, updated_at=now + 86_400), now=now)
    assert t3._elapsed_before == 50.0
    # a record written before the count existed: from its start time, as before
    t4 = ProgressTracker()
    t4.restore(progress.Record(started_at=now - 30), now=now)
    assert t4._elapsed_before == 30.0
