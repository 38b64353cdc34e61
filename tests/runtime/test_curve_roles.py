"""A real role with its experiment's key file hears its members and refuses everyone else."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

from surreal_kube.comm import curve
from surreal_kube.comm.metrics import LogForwarder
from surreal_kube.launch.keys import write_keys
from tests.runtime.harness import LocalRun

FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def _forward(handler: LogForwarder, text: str) -> None:
    record = logging.LogRecord("test", logging.WARNING, __file__, 0, text, None, None)
    handler.emit(record)


def _wait_for(path: Path, text: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never held {text!r}")


def test_loggerplex_refuses_a_peer_without_the_key_and_hears_one_with_it(tmp_path: Path) -> None:
    before = curve.installed()
    run = LocalRun(tmp_path)
    keys = curve.load_key_file(write_keys(run.dir))  # as `create` writes it
    try:
        run.start("loggerplex")
        run.wait_log("loggerplex", "loggerplex writing to")
        for stranger_keys in (None, curve.generate()):  # no key; another experiment's key
            curve.install(stranger_keys)
            stranger = LogForwarder(run.addr("loggerplex"), "learner")
            monitor = stranger._sock.get_monitor_socket(FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
            _forward(stranger, "the learner finished")
            assert monitor.poll(10_000), "no handshake event"
            assert recv_monitor_message(monitor)["event"] & FAILED
            # monitoring off before its reader closes: the stranger's socket lingers after
            # close (its line never left) and goes on failing handshakes; with the reader of
            # those events closed first, every later socket of this process stalled (the
            # context's one I/O thread: 22 runtime tests after this one failed)
            stranger._sock.disable_monitor()
            monitor.close(0)
            stranger.close()
        curve.install(keys)
        member = LogForwarder(run.addr("loggerplex"), "ps")
        _forward(member, "a member's line")
        _wait_for(run.dir / "logs" / "ps.log", "a member's line")
        member.close()
        assert run.terminate("loggerplex")[0] == 0
        assert not (run.dir / "logs" / "learner.log").exists()
    finally:
        curve.install(before)
        run.close()
