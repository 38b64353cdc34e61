"""Tensorplex and loggerplex as real processes: event files and log files with what was sent."""

from __future__ import annotations

import logging
import time

import pytest
import zmq
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from surreal_kube.comm.metrics import LogForwarder, MetricsClient
from surreal_kube.comm.sockets import make_socket

pytestmark = pytest.mark.slow


def _scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorplex_writes_event_files_that_read_back(local_run):
    run = local_run(
        {"agents": {"count": 4, "batch": 1}, "session": {"metrics": {"agentBinSize": 2}}}
    )
    run.start("tensorplex")
    run.wait_log("tensorplex", "tensorplex writing to")
    learner = MetricsClient(run.addr("tensorplex"), "learner")
    agents = [
        MetricsClient(run.addr("tensorplex"), f"agents-{i}", group="agents", index=i)
        for i in range(3)
    ]
    raw = make_socket(zmq.PUSH, connect=run.addr("tensorplex"))
    try:
        for step in range(5):
            assert learner.add_scalars({"losses/policy": step * 0.5, "learner/lr": 1e-4}, step)
        for i, client in enumerate(agents):
            client.add_scalars({"charts/episodic_return": 10.0 * (i + 1)}, 100)
        raw.send(b"\x81\xa1vgarbage")  # counted and ignored
        time.sleep(0.5)
    finally:
        for client in (learner, *agents):
            client.close()
        raw.close(0)
    code, _ = run.terminate("tensorplex")
    assert code == 0  # exited on SIGTERM within the harness's wait

    board = run.dir / "tensorboard"
    learner_scalars = _scalars(board / "learner")
    assert learner_scalars["losses/policy"] == [(s, s * 0.5) for s in range(5)]
    assert learner_scalars["learner/lr"][0][1] == pytest.approx(1e-4)
    # Agents 0 and 1 share bin 0-1 (their mean); agent 2 is alone in bin 2-3.
    assert _scalars(board / "agents" / "0-1")["charts/episodic_return"] == [(100, 15.0)]
    assert _scalars(board / "agents" / "2-3")["charts/episodic_return"] == [(100, 30.0)]
    own = _scalars(board / "tensorplex")
    assert own["tensorplex/rejected_messages"][-1][1] == 1.0


def test_loggerplex_writes_one_file_per_component(local_run):
    run = local_run()
    run.start("loggerplex")
    run.wait_log("loggerplex", "loggerplex writing to")
    run.start("ps")  # a real role, forwarding its own log lines
    run.wait_log("ps", "parameter server proxy")
    handler = LogForwarder(run.addr("loggerplex"), "learner")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("test.loggerplex")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("first line")
        logger.warning("second line")
        time.sleep(0.5)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert run.terminate("ps")[0] == 0
    code, _ = run.terminate("loggerplex")
    assert code == 0  # exited on SIGTERM within the harness's wait

    logs = run.dir / "logs"
    assert sorted(p.name for p in logs.glob("*.log")) == ["learner.log", "ps.log"]
    assert (logs / "learner.log").read_text().splitlines() == [
        "WARNING first line",
        "WARNING second line",
    ]
    ps_log = (logs / "ps.log").read_text()
    assert "INFO ps surreal_kube.runtime.ps: parameter server proxy" in ps_log
