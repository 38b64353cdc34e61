"""Tensorplex and loggerplex take the topology's sources only, and log files stay bounded."""

from __future__ import annotations

import logging
import time

import pytest

from surreal_kube.comm.metrics import LogForwarder, MetricsClient
from surreal_kube.runtime.loggerplex import LogFiles
from tests.runtime.test_metrics_logs import _scalars

pytestmark = pytest.mark.slow


def _own_rejects(run) -> float:
    return _scalars(run.dir / "tensorboard" / "tensorplex")["tensorplex/rejected_messages"][-1][1]


def test_tensorplex_opens_no_run_for_a_name_outside_the_topology(local_run):
    """Before: any DNS-style source name got its own event-file folder (a writer each), and a
    stranger's scalars counted in the run's progress and its end."""
    run = local_run({"agents": {"count": 2, "batch": 1}})
    run.start("tensorplex")
    run.wait_log("tensorplex", "tensorplex writing to")
    addr = run.addr("tensorplex")
    clients = [
        MetricsClient(addr, f"stranger-{i}")
        for i in range(20)  # not processes of this run
    ] + [
        MetricsClient(addr, "agents-0", group="agents", index=7),  # not an agent of this run
        MetricsClient(addr, "learner", group="agents", index=0),  # not of that group
    ]
    learner = MetricsClient(addr, "learner")
    try:
        for client in clients:
            assert client.add_scalars({"learner/iteration": 1e9}, 10**12)
        assert learner.add_scalars({"learner/iteration": 3.0}, 30)
        time.sleep(0.5)
    finally:
        for client in (*clients, learner):
            client.close()
    assert run.terminate("tensorplex")[0] == 0
    board = run.dir / "tensorboard"
    assert sorted(p.name for p in board.iterdir()) == ["learner", "tensorplex"]
    assert _scalars(board / "learner")["learner/iteration"] == [(30, 3.0)]
    assert _own_rejects(run) == 22.0


def test_loggerplex_writes_no_file_for_a_name_outside_the_topology(local_run):
    """Before: any DNS-style source name became `<name>.log`, one more file each."""
    run = local_run()
    run.start("loggerplex")
    run.wait_log("loggerplex", "loggerplex writing to")
    logger = logging.getLogger("test.sources")
    logger.propagate = False
    handlers = [LogForwarder(run.addr("loggerplex"), name) for name in ("learner", "intruder")]
    for handler in handlers:
        logger.addHandler(handler)
    try:
        logger.warning("a line")
        time.sleep(0.5)
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
    assert run.terminate("loggerplex")[0] == 0
    assert sorted(p.name for p in (run.dir / "logs").iterdir()) == ["learner.log"]


def test_log_files_rotate_at_their_size_bound(tmp_path):
    """Before: a file grew for as long as its source logged."""
    files = LogFiles(tmp_path, max_bytes=1000, backups=2)
    for i in range(105):  # 100 bytes a line: a file every 10 lines
        files.write("learner", f"line {i:03d} " + "x" * 90)
    files.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["learner.log", "learner.log.1", "learner.log.2"]
    assert files.rotations == 10

    def first(name: str) -> str:
        return (tmp_path / name).read_text().splitlines()[0][:8]

    assert [first(n) for n in names] == ["line 100", "line 090", "line 080"]
