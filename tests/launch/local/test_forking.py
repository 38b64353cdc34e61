"""Roles forked from the fork server: own group, own log, the environment sent, exit codes back.

A real server (`python -m surreal_kube.runtime.forkserver`) forks a real light role (loggerplex,
with the environment the topology gives it), so these run in seconds.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from surreal_kube.launch.local.forking import ForkServer
from tests.runtime.harness import LocalRun


def _wait(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _server(run: LocalRun, tmp_path: Path) -> ForkServer:
    env = dict(os.environ, SURREAL_EXPERIMENT_DIR=str(run.dir))
    return ForkServer(sys.executable, env, run.dir, tmp_path / "forkserver.out")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.fixture
def run(tmp_path: Path) -> LocalRun:
    return LocalRun(tmp_path / "exps")


def test_forked_role_has_its_group_log_and_environment(run: LocalRun, tmp_path: Path) -> None:
    server = _server(run, tmp_path)
    out = tmp_path / "loggerplex.out"
    try:
        role = server.spawn(
            ["loggerplex", "--id", "0"], env=run.env("loggerplex"), cwd=run.dir, out=out,
            heavy=False,
        )  # fmt: skip
        pid = _wait(lambda: role.pid, 60, "the fork")
        assert os.getpgid(pid) == pid  # its own process group, signalled as a unit
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "loggerplex"
        assert (
            f"SURREAL_EXPERIMENT_DIR={run.dir}".encode()
            in Path(f"/proc/{pid}/environ").read_bytes()
        )  # how a dead supervisor's leftovers are recognised
        _wait(lambda: out.exists() and "loggerplex writing to" in out.read_text(), 60, "its log")
        assert role.poll() is None
        os.killpg(pid, signal.SIGTERM)
        assert role.wait(timeout=20) == 0  # a clean stop, reported by the server
    finally:
        server.close()
    assert not _alive(server.pid)


def test_roles_stop_when_the_server_dies(run: LocalRun, tmp_path: Path) -> None:
    server = _server(run, tmp_path)
    try:
        role = server.spawn(
            ["loggerplex", "--id", "0"], env=run.env("loggerplex"), cwd=run.dir,
            out=tmp_path / "loggerplex.out", heavy=False,
        )  # fmt: skip
        pid = _wait(lambda: role.pid, 60, "the fork")
        _wait(lambda: "loggerplex writing to" in (tmp_path / "loggerplex.out").read_text(), 60,
              "its log")  # fmt: skip
        os.kill(server.pid, signal.SIGKILL)
        _wait(lambda: not _alive(pid), 30, "the orphaned role to stop")
        assert role.wait(timeout=10) == 1  # its exit code went with the server
        assert "stopped (supervisor gone)" in (tmp_path / "loggerplex.out").read_text()
    finally:
        server.close()


def test_a_bad_request_is_answered_and_the_server_goes_on(run: LocalRun, tmp_path: Path) -> None:
    server = _server(run, tmp_path)
    try:
        bad = server.spawn(["no-such-role"], env=run.env("loggerplex"), cwd=run.dir,
                           out=tmp_path / "bad.out", heavy=False)  # fmt: skip
        assert bad.wait(timeout=60) == 2  # the role parser refuses it, as surreal-kube-role does
        assert "invalid choice: 'no-such-role'" in (tmp_path / "bad.out").read_text()
        good = server.spawn(["loggerplex"], env=run.env("loggerplex"), cwd=run.dir,
                            out=tmp_path / "good.out", heavy=False)  # fmt: skip
        pid = _wait(lambda: good.pid, 60, "the fork")
        _wait(lambda: "loggerplex writing to" in (tmp_path / "good.out").read_text(), 60, "its log")
        os.killpg(pid, signal.SIGTERM)
        assert good.wait(timeout=20) == 0
    finally:
        server.close()
