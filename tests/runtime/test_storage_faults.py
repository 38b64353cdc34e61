"""Roles on a disk that fills up: a real tensorplex process writing to a real small tmpfs.

Before the fix the first event file write that hit ENOSPC ended tensorplex, so a run whose disk
filled up never ended with its results.
"""

from __future__ import annotations

import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from surreal_kube.comm.metrics import MetricsClient
from tests.session.tmpfs import fill, free, small_tmpfs

pytestmark = pytest.mark.slow


def _steps(run_dir, tag: str) -> list[int]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def test_tensorplex_survives_a_full_disk_and_writes_again_once_space_is_back(local_run):
    run = local_run()
    with small_tmpfs(run.dir / "tensorboard", "2m") as board:
        run.start("tensorplex")
        run.wait_log("tensorplex", "tensorplex writing to")
        learner = MetricsClient(run.addr("tensorplex"), "learner")
        try:
            step = 0

            def send(n: int) -> None:
                nonlocal step
                for _ in range(n):
                    assert learner.add_scalars({"losses/policy": float(step)}, step)
                    step += 1

            send(5)
            wait_for_steps(board / "learner", lambda s: 4 in s)
            fill(board)
            # points sent until tensorplex finds the disk full (its writes are flushed every 2 s)
            deadline = time.monotonic() + 60
            while "cannot write TensorBoard events" not in run.log_path("tensorplex").read_text():
                assert time.monotonic() < deadline, "tensorplex never found the disk full"
                send(50)
                assert run.procs["tensorplex"].poll() is None, run.log_path(
                    "tensorplex"
                ).read_text()
                time.sleep(0.2)
            lost_from = step
            send(20)  # while full: dropped, and tensorplex lives on
            assert run.procs["tensorplex"].poll() is None
            free(board)
            deadline = time.monotonic() + 60
            while "TensorBoard events written again" not in run.log_path("tensorplex").read_text():
                assert time.monotonic() < deadline, "tensorplex never wrote again"
                assert run.procs["tensorplex"].poll() is None
                send(1)
                time.sleep(0.2)
            back_from = step
            send(5)
        finally:
            learner.close()
        code, _ = run.terminate("tensorplex")
        assert code == 0, run.log_path("tensorplex").read_text()
        log = run.log_path("tensorplex").read_text()
        assert log.count("cannot write TensorBoard events") == 1  # once per fault, not per point
        steps = _steps(board / "learner", "losses/policy")
        assert steps[:5] == [0, 1, 2, 3, 4]
        assert set(range(back_from, step)) <= set(steps)  # written again after the fault
        assert not set(range(lost_from, lost_from + 20)) & set(steps)  # dropped while full
        own = EventAccumulator(str(board / "tensorplex"))
        own.Reload()
        assert own.Scalars("tensorplex/dropped_points")[-1].value >= 20
        assert own.Scalars("tensorplex/write_failures")[-1].value >= 1


def wait_for_steps(run_dir, predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run_dir.is_dir() and predicate(_steps(run_dir, "losses/policy")):
            return
        time.sleep(0.2)
    raise AssertionError(f"no such steps in {run_dir}: {_steps(run_dir, 'losses/policy')}")
