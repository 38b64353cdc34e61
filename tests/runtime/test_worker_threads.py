"""A role whose worker thread dies exits non-zero, and the supervisor sees it; subscribe storms
cost one resend per window.

The learner's work happens in two threads besides its loop: the prefetcher (sample requests and
batches) and the parameter publisher. Either one dying used to leave a learner that kept its
heartbeat and never learned (or never published) again. Here the thread's socket fails for real
(`tests/runtime/faulty_role.py`: its poll raises ENOTSOCK), in the real role process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import zmq

from surreal_kube.comm import parameters, seal
from surreal_kube.comm.parameters import ParameterPublisher
from surreal_kube.comm.sockets import connect_and_wait, make_socket
from surreal_kube.experiment.resolve import dump_yaml, resolve_experiment
from surreal_kube.experiment.topology import Process
from surreal_kube.launch.local import supervisor as sv
from surreal_kube.launch.local.folder import ExperimentFolder, read_json
from surreal_kube.launch.local.sockets import Wiring

REPO = Path(__file__).resolve().parents[2]
FAULTY = [sys.executable, "-m", "tests.runtime.faulty_role"]
DIED = {
    "prefetcher": "the sample prefetcher's thread died",
    "param-publisher": "the parameter publisher's thread died",
}


def _wait_text(path: Path, text: str, popen: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        assert popen.poll() is None, path.read_text(errors="replace")
        assert time.monotonic() < deadline, f"never logged {text!r}"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("thread", ["prefetcher", "param-publisher"])
def test_the_learner_exits_1_when_a_worker_thread_dies_while_it_waits(
    local_run, tmp_path: Path, thread: str
) -> None:
    """No replay runs: the learner waits for its first batch, as after a start or a replay
    restart. Before: a dead publisher went unnoticed while the learner waited (it raised only at
    the next publication, which a waiting learner never makes): no republish, no parameters for
    a restarted parameter-server shard, and a learner alive for nothing."""
    run = local_run()
    trigger = tmp_path / "fail-now"
    env = run.env("learner") | {"FAULT_THREAD": thread, "FAULT_TRIGGER": str(trigger)}
    log = run.log_path("learner")
    with open(log, "ab") as out:
        learner = subprocess.Popen(
            [*FAULTY, "learner", "--id", "0"],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait_text(log, "learner: ppo, batches of", learner, 120)  # its loop runs
        trigger.touch()
        try:
            code = learner.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the learner outlived its {thread} thread:\n{log.read_text(errors='replace')}"
            ) from None
    finally:
        if learner.poll() is None:
            learner.kill()
            learner.wait()
    text = log.read_text(errors="replace")
    assert code == 1, text
    assert DIED[thread] in text
    assert "ENOTSOCK" in text or "not a socket" in text.lower()


class FaultySupervisor(sv.Supervisor):
    """The real learner with its worker thread failing; every other role a `sleep`."""

    thread: ClassVar[str] = "prefetcher"
    use_forkserver = False

    def command(self, proc: Process) -> list[str]:  # type: ignore[override]
        if proc.role == "learner":
            return [*FAULTY, "learner", "--id", "0"]
        return ["sleep", "120"]

    def environment(self, proc: Process) -> dict[str, str]:
        env = super().environment(proc)
        env["FAULT_THREAD"] = self.thread
        env["PYTHONPATH"] = str(REPO)
        return env


@pytest.mark.slow
def test_the_local_supervisor_sees_the_learner_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sv, "LEARNER_MAX_RESTARTS", 0)
    exp = resolve_experiment("faulty", sets=["session.maxTimeSeconds=600"])
    folder = ExperimentFolder(tmp_path / "faulty")
    folder.create()
    folder.config.write_text(dump_yaml(exp))
    sup = FaultySupervisor(exp, exp.topology, folder, Wiring.plan(folder.path, exp.topology, set()))
    sup.start()
    try:
        sup.run(period=0.2)
    finally:
        sup.stop()
    sup.finish()
    assert sup.phase == "Failed"
    assert sup.reason == "learner exhausted its 0 restarts (last: exit code 1)"
    state = read_json(folder.state)
    assert state["phase"] == "Failed"
    assert state["processes"]["learner"]["last_exit"] == 1
    learner_out = (folder.path / "logs" / "learner.out").read_text(errors="replace")
    assert DIED["prefetcher"] in learner_out


def test_a_subscribe_storm_makes_at_most_one_resend_per_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted on the wire: an observer subscribed before the storm receives every publication
    the publisher sends. The window is made longer than the test, so "at most one resend per
    window" is "one resend in all": the observer's own subscription's. Before: every subscribe
    resent the parameters to every subscriber (20 x 50 subscriptions: a thousand copies)."""
    monkeypatch.setattr(parameters, "RESEND_SECONDS", 3600.0)
    pub = ParameterPublisher("tcp://127.0.0.1:*", republish_seconds=3600.0)
    params = {"w": np.arange(1000, dtype=np.float32)}
    observer = make_socket(zmq.SUB, connect=pub.addr, sealed=True)  # as a shard connects
    storm: list[zmq.Socket[bytes]] = []
    try:
        pub.publish(params, 1)  # no subscriber yet: sent to nobody
        # sent before the observer subscribes: a subscription that reached the publisher during
        # this send would have had the publication and its resend too (two copies, not a storm)
        deadline = time.monotonic() + 10
        while pub.published < 1:
            assert time.monotonic() < deadline, "the first publication was never sent"
            time.sleep(0.01)
        observer.setsockopt(zmq.SUBSCRIBE, b"")
        assert observer.poll(10_000), "a new subscriber got no parameters"  # the one resend
        got = [observer.recv_multipart()]
        for _ in range(20):
            # its queue holds the whole storm (an XSUB drops what is above its high-water mark)
            sock = make_socket(zmq.XSUB, sndhwm=100_000, sealed=True)
            storm.append(sock)
            # connected first: an XSUB sends what it is told only to the peers it has
            assert connect_and_wait(sock, pub.addr, 10.0)
        for n in range(50):
            for i, sock in enumerate(storm):  # topics of their own: each one is passed on
                sock.send(b"\x01storm-%d-%d" % (i, n))
        expected = 1 + 20 * 50  # the observer's, then the storm's
        deadline = time.monotonic() + 60
        while pub.subscriptions < expected:
            assert time.monotonic() < deadline, (pub.subscriptions, expected)
            time.sleep(0.01)
        pub.publish(params, 2)  # a marker: what came before it is on the wire already
        assert observer.poll(10_000), "the marker never came"
        while observer.poll(200):
            got.append(observer.recv_multipart())
        opener = seal.Opener(fresh=False)  # sealed by the publisher, if keys
        iterations = [parameters.wire.decode(opener.open(f)).meta["iteration"] for f in got]
        assert iterations == [1, 2], iterations  # the observer's resend, the marker
        assert pub.published == 3  # the first publication (to nobody), the resend, the marker
        assert pub.subscriptions == expected
    finally:
        for sock in (observer, *storm):
            sock.close(0)
        pub.close()
