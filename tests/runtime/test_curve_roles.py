"""A real role with its experiment's key file hears its members and refuses everyone else."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

from surreal_kube.comm import curve, seal, wire
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
            # The forwarder connected as it was made: on a loaded machine its one handshake
            # can be over before the monitor is there, and libzmq does not retry a refused
            # one (a cold run's test waited 10 s for nothing). Dial again, watched.
            stranger._sock.disconnect(run.addr("loggerplex"))
            stranger._sock.connect(run.addr("loggerplex"))
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


def _handshake(kind: int, addr: str, **curve_options: bytes) -> int:
    """The first handshake event of a hand-made socket of `kind` connected to `addr`."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    for name, value in curve_options.items():
        sock.setsockopt(getattr(zmq, name), value)
    monitor = sock.get_monitor_socket(FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        sock.connect(addr)
        assert monitor.poll(10_000), f"no handshake event from {addr}"
        return int(recv_monitor_message(monitor)["event"])
    finally:
        sock.disable_monitor()
        monitor.close(0)
        sock.close(0)


def _ask(addr: str, frames: list[bytes]) -> list[bytes]:
    """A hand-made DEALER's request to `addr` (no CURVE) and the frames of its answer."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(addr)
        sock.send_multipart([b"", *frames])
        assert sock.poll(10_000), f"no answer from {addr}"
        _, *answer = sock.recv_multipart()
        return answer
    finally:
        sock.close(0)


def _no_parameters(answer: list[bytes]) -> bool:
    """Whether an answer of the parameter server holds no parameters (a refusal)."""
    return len(answer) == 1 and wire.decode(answer).kind == wire.NO_PARAMS


def test_the_parameter_servers_in_pod_hop_is_plain_and_its_service_refuses_strangers(
    local_run,
) -> None:
    """Issue 25 item 2 at its price: the hop between the parameter server's proxy and its
    shard, which on Kubernetes is the pod's loopback (nothing outside the pod reaches it), is a
    plain socket. The service other pods dial carries sealed fetches (`comm.seal`: sealed once
    per publication, not encrypted per agent by CURVE): a peer may connect, but one without the
    key, one with another experiment's key, and one that plays a member's request again get no
    parameters; a member agent fetches through both hops."""
    import numpy as np

    from surreal_kube.comm.parameters import ParameterClient, ParameterPublisher
    from surreal_kube.runtime.context import RoleContext

    before = curve.installed()
    run = local_run({"env": {"id": "gym:CartPole-v1"}})
    keys = curve.load_key_file(write_keys(run.dir))
    curve.install(keys)
    publisher = client = None
    try:
        assert "ps-backend" in run.env("ps")["SURREAL_POD_ENDPOINTS"]
        for name in ("ps", "ps-shard-0"):
            run.start(name)
        run.wait_log("ps-shard-0", "parameter", timeout=120)
        learner = RoleContext.from_env(run.env("learner"), role="learner")
        publisher = ParameterPublisher(learner.bind("parameter-publish"))
        publisher.publish({"w": np.arange(4, dtype=np.float32)}, iteration=3)
        client = ParameterClient(run.addr("ps-serve"), timeout=5.0)
        deadline = time.monotonic() + 60
        while client.info is None and time.monotonic() < deadline:
            if client.fetch() is None:
                time.sleep(0.1)
        assert client.info is not None and client.info.iteration == 3
        assert _handshake(zmq.ROUTER, run.addr("ps-backend")) == zmq.EVENT_HANDSHAKE_SUCCEEDED

        fetch = wire.encode(wire.FETCH, {"hash": None})
        member_request = seal.seal(fetch)
        answer = _ask(run.addr("ps-serve"), member_request)
        assert wire.decode(seal.Opener(fresh=False).open(answer)).kind == wire.PARAMS
        assert _no_parameters(_ask(run.addr("ps-serve"), member_request))  # played again
        assert _no_parameters(_ask(run.addr("ps-serve"), fetch))  # no key at all
        curve.install(curve.generate())  # another experiment's key
        assert _no_parameters(_ask(run.addr("ps-serve"), seal.seal(fetch)))
        curve.install(keys)
        assert client.fetch() is None and client.last_outcome == "unchanged"
    finally:
        if client is not None:
            client.close()
        if publisher is not None:
            publisher.close()
        curve.install(before)
