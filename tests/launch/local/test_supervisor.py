"""The supervisor's own mechanics with real OS processes: restarts, backoff, budgets, clean stop.

The roles are replaced by plain shell commands here on purpose: these tests are about process
supervision; the real roles are exercised end to end in test_local_experiment.py.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import ClassVar

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.local import supervisor as sv
from surreal_kube.launch.local.backend import pid_alive
from surreal_kube.launch.local.folder import ExperimentFolder, read_json, write_json_atomic
from surreal_kube.launch.local.ports import (
    allocate_ports,
    port_is_free,
    ports_in_use_by_experiments,
)
from surreal_kube.launch.local.sockets import Wiring


class ShellSupervisor(sv.Supervisor):
    """Runs `commands[role]` instead of the role entry point."""

    commands: ClassVar[dict[str, list[str]]] = {}
    use_forkserver = False  # shell commands are not roles: started as processes of their own

    def command(self, proc):  # type: ignore[override]
        return self.commands.get(proc.role, ["sleep", "60"])


def make(tmp_path: Path, sets: list[str], commands: dict[str, list[str]]) -> ShellSupervisor:
    exp = resolve_experiment("sup", sets=sets)
    topo = exp.topology
    folder = ExperimentFolder(tmp_path / "sup")
    folder.create()
    sup = ShellSupervisor(exp, topo, folder, Wiring.plan(folder.path, topo, set()))
    sup.commands = commands
    return sup


alive = pid_alive  # zombies waiting for init to reap them count as gone


def test_crashed_process_is_restarted_with_backoff_and_counted(tmp_path: Path) -> None:
    sup = make(tmp_path, ["session.maxTimeSeconds=5"], {"eval": ["sh", "-c", "exit 3"]})
    sup.start()
    try:
        sup.run(period=0.2)
        # said as soon as it is decided (before: Running until every process had stopped),
        # with its reason; not final before the stop
        stopping = read_json(sup.folder.state)
        assert (stopping["phase"], stopping["reason"]) == ("Stopping", "reached 5 s of wall time")
    finally:
        sup.stop()
    assert read_json(sup.folder.state)["phase"] == "Stopping"
    sup.finish()
    ev = sup.children["evals-0"]
    assert ev.restarts >= 2  # 1 s then 2 s backoff within 5 s
    assert ev.last_exit == 3
    assert all(c.restarts == 0 for n, c in sup.children.items() if n != "evals-0")
    state = read_json(sup.folder.state)
    assert state["processes"]["evals-0"]["restarts"] == ev.restarts
    assert state["phase"] == "Succeeded" and state["reason"] == "reached 5 s of wall time"


def test_learner_that_keeps_dying_fails_the_experiment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sv, "BACKOFF_MIN", 0.05)
    monkeypatch.setattr(sv, "LEARNER_MAX_RESTARTS", 2)
    sup = make(tmp_path, ["session.maxTimeSeconds=30"], {"learner": ["sh", "-c", "exit 1"]})
    sup.children["learner"].backoff = 0.05
    sup.start()
    try:
        sup.run(period=0.1)
    finally:
        sup.stop()
    sup.finish()
    assert sup.phase == "Failed"
    assert "learner exhausted its 2 restarts" in sup.reason


def test_stop_leaves_no_process_and_frees_ports(tmp_path: Path) -> None:
    # a child that ignores SIGTERM and has a grandchild: both must go
    stubborn = ["sh", "-c", "trap '' TERM; sleep 60 & wait"]
    sup = make(tmp_path, [], {"tensorplex": stubborn})
    sup.start()
    pids = [c.popen.pid for c in sup.children.values()]
    assert all(alive(p) for p in pids)
    time.sleep(0.3)
    stubborn_pid = sup.children["tensorplex"].popen.pid
    grandchildren = [int(x) for x in os.popen(f"pgrep -P {stubborn_pid}").read().split()]
    assert grandchildren, "the stubborn child should have started its sleep"
    monkey_grace = sv.STOP_GRACE
    sv.STOP_GRACE = 1.0
    try:
        sup.stop()
    finally:
        sv.STOP_GRACE = monkey_grace
    time.sleep(0.2)
    assert not any(alive(p) for p in pids + grandchildren)
    assert all(port_is_free(p) for p in sup.wiring.ports.values())
    assert not sup.wiring.sockets.exists()  # the run's socket folder went with it


def test_environment_has_the_topology_and_single_threaded_math(tmp_path: Path) -> None:
    sup = make(tmp_path, [], {})
    env = sup.environment(sup.topology.process("agents-1"))
    assert env["SURREAL_ROLE"] == "agents" and env["SURREAL_INDEX"] == "1"
    assert env["SURREAL_PS_SERVE_ADDR"] == f"ipc://{sup.wiring.sockets}/ps-serve"
    assert env["SURREAL_CONFIG"] == str(sup.folder.config)
    assert env["OMP_NUM_THREADS"] == "1"
    assert sup.command(sup.topology.process("learner")) == ["sleep", "60"]
    assert sv.Supervisor.command(sup, sup.topology.process("agents-1"))[-3:] == [
        "agents",
        "--id",
        "1",
    ]


def test_two_experiments_never_share_a_port(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first = allocate_ports([f"e{i}" for i in range(10)], set())
    write_json_atomic(root / "one" / "state.json", {"phase": "Running", "ports": first})
    used = ports_in_use_by_experiments(root)
    assert used == set(first.values())
    second = allocate_ports([f"e{i}" for i in range(10)], used)
    assert not set(first.values()) & set(second.values())
    assert len(set(second.values())) == 10


def test_a_full_disk_does_not_end_the_supervisor_and_the_state_is_written_again(
    tmp_path: Path,
) -> None:
    from tests.session.tmpfs import fill, free, small_tmpfs

    with small_tmpfs(tmp_path / "fs", "1m") as fs:
        exp = resolve_experiment("sup", sets=[])
        topo = exp.topology
        folder = ExperimentFolder(fs / "sup")
        folder.create()
        sup = ShellSupervisor(exp, topo, folder, Wiring.plan(folder.path, topo, set()))
        sup.commands = {}
        sup.start()
        try:
            before = read_json(folder.state)
            fill(fs)
            for _ in range(3):
                sup.poll()  # raised OSError (ENOSPC) out of write_state before the fix
            assert sup.state_write_failures == 3
            assert read_json(folder.state) == before  # the previous file, whole
            assert not list(folder.path.glob(".state.json.*.tmp"))
            free(fs)
            sup.poll()
            state = read_json(folder.state)
            assert state["state_write_failures"] == 3 and state["phase"] == "Running"
        finally:
            sup.stop()


def _step_the_wall_clock(monkeypatch, seconds: float) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


def test_a_wall_clock_step_forward_does_not_end_the_run(tmp_path: Path, monkeypatch) -> None:
    sup = make(tmp_path, ["session.maxTimeSeconds=3"], {"eval": ["sh", "-c", "exit 3"]})
    sup.start()
    try:
        _step_the_wall_clock(monkeypatch, 86_400.0)  # NTP fixes a clock a day behind
        assert sup.budget_reached() is None
        sup.run(period=0.2)
    finally:
        sup.stop()
        monkeypatch.undo()
    assert sup.final_phase == "Succeeded" and sup.reason == "reached 3 s of wall time"
    # it ran its 3 s: the evaluator died and came back in that time (1 s, then up to 2 s)
    assert sup.children["evals-0"].restarts >= 2


def test_a_wall_clock_step_back_does_not_hold_a_restart_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sv, "BACKOFF_MIN", 0.2)
    sup = make(tmp_path, [], {"eval": ["sh", "-c", "exit 3"]})
    sup.children["evals-0"].backoff = 0.2
    sup.start()
    try:
        ev = sup.children["evals-0"]
        deadline = time.monotonic() + 30
        while ev.state != "backoff":
            assert time.monotonic() < deadline
            sup.poll()
            time.sleep(0.05)
        _step_the_wall_clock(monkeypatch, -86_400.0)  # the clock is set a day back
        while ev.state == "backoff":
            # before the fix the restart waited for the wall clock to catch up: a day
            assert time.monotonic() < deadline, "the restart is held back by the clock step"
            sup.poll()
            time.sleep(0.05)
        assert ev.restarts == 1
    finally:
        sup.stop()


def test_restart_delays_are_jittered_within_their_backoff() -> None:
    delays = [sv.restart_delay(8.0) for _ in range(200)]
    assert all(8.0 * (1 - sv.JITTER) <= d <= 8.0 for d in delays)
    # roles that died together come back spread out, not in lockstep
    assert max(delays) - min(delays) > 8.0 * sv.JITTER / 2


@pytest.mark.parametrize("made_again", [False, True], ids=["removed", "made-again"])
def test_a_run_whose_folder_is_removed_stops_and_writes_nothing_there(
    tmp_path: Path, monkeypatch, made_again: bool
) -> None:
    # Seen: `rm -rf` of a running experiment's folder left its processes learning until the
    # budget, unseen by list and delete, and the end of the run wrote its results (and the
    # folders under them) back where a new experiment of the same name could be.
    monkeypatch.setattr(sv, "Supervisor", ShellSupervisor)
    monkeypatch.setattr(ShellSupervisor, "commands", {})
    exp = resolve_experiment("sup", sets=["session.maxTimeSeconds=20"])
    folder = ExperimentFolder(tmp_path / "sup")
    folder.create()
    pids: list[int] = []

    def remove_once(sup: sv.Supervisor) -> None:
        if not pids:
            pids.extend(c.popen.pid for c in sup.children.values() if c.popen is not None)
            shutil.rmtree(folder.path)
            if made_again:
                folder.path.mkdir()

    sup, _ = sv.supervise(
        exp, folder, Wiring.plan(folder.path, exp.topology, set()), tick=remove_once
    )
    assert sup.phase == "Failed", sup.reason
    assert f"the experiment folder {folder.path} was removed, moved or made again" in sup.reason
    assert len(pids) == len(exp.topology.processes)
    assert not [p for p in pids if alive(p)]
    if made_again:
        assert not list(folder.path.iterdir())  # the new folder is not this run's to write
    else:
        assert not folder.path.exists()
