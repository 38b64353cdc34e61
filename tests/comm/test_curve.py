"""CURVE: a peer without the experiment's key gets no message accepted (real sockets, 127.0.0.1)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from surreal_kube.comm import curve
from surreal_kube.comm.sockets import bind_any_port, bound_address, context, make_socket
from surreal_kube.errors import RuntimeRoleError
from surreal_kube.launch.keys import write_keys
from surreal_kube.runtime.context import RoleContext

HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
WAIT_MS = 10_000
"""How long to wait for an event that must come (a bound on a hang, not a timing assertion)."""


@pytest.fixture
def keys() -> Iterator[curve.CurveKeys]:
    """This process's sockets use a fresh experiment keypair; whatever was installed before
    (none, or the keys of a CURVE-on test run) comes back afterwards."""
    before = curve.installed()
    the_keys = curve.generate()
    curve.install(the_keys)
    yield the_keys
    curve.install(before)


def _server(**options: object) -> tuple[zmq.Socket[bytes], str, zmq.Socket[bytes]]:
    pull, addr = bind_any_port(zmq.PULL, **options)  # type: ignore[arg-type]
    return pull, addr, pull.get_monitor_socket(HANDSHAKE_FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED)


def _next_event(monitor: zmq.Socket[bytes]) -> int:
    from zmq.utils.monitor import recv_monitor_message

    assert monitor.poll(WAIT_MS), "no handshake event"
    return int(recv_monitor_message(monitor)["event"])


def _raw_push(addr: str, **curve_options: bytes) -> zmq.Socket[bytes]:
    """A stranger's socket: made by hand, not by `make_socket`, so no installed keys."""
    sock = context().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    for name, value in curve_options.items():
        sock.setsockopt(getattr(zmq, name), value)
    sock.connect(addr)
    return sock


def test_a_peer_without_keys_is_refused_and_one_with_them_is_heard(keys: curve.CurveKeys) -> None:
    pull, addr, monitor = _server()
    plain = _raw_push(addr)  # NULL mechanism: knows the address, nothing else
    plain.send(b"finished", zmq.NOBLOCK)  # queued on its side, never delivered
    event = _next_event(monitor)
    assert event & HANDSHAKE_FAILED
    assert pull.poll(0) == 0
    member = make_socket(zmq.PUSH, connect=addr)  # an experiment's process: the installed keys
    member.send(b"hello")
    assert _next_event(monitor) == zmq.EVENT_HANDSHAKE_SUCCEEDED
    assert pull.poll(WAIT_MS) and pull.recv() == b"hello"
    for s in (plain, member, monitor, pull):
        s.close(0)


def test_a_stranger_with_its_own_keypair_is_refused_even_knowing_the_public_key(
    keys: curve.CurveKeys,
) -> None:
    """CURVE alone would let it in (it knows the server's public key); the ZAP allowlist,
    which accepts only the experiment's own client key, does not."""
    pull, addr, monitor = _server()
    own = curve.generate()
    stranger = _raw_push(
        addr, CURVE_SERVERKEY=keys.public, CURVE_PUBLICKEY=own.public, CURVE_SECRETKEY=own.secret
    )
    stranger.send(b"version 1e18", zmq.NOBLOCK)
    assert _next_event(monitor) == zmq.EVENT_HANDSHAKE_FAILED_AUTH
    assert pull.poll(0) == 0
    for s in (stranger, monitor, pull):
        s.close(0)


def test_a_peer_that_claims_our_public_key_without_the_secret_is_refused(
    keys: curve.CurveKeys,
) -> None:
    pull, addr, monitor = _server()
    other = curve.generate()
    stranger = _raw_push(
        addr, CURVE_SERVERKEY=keys.public, CURVE_PUBLICKEY=keys.public, CURVE_SECRETKEY=other.secret
    )
    stranger.send(b"forged", zmq.NOBLOCK)
    assert _next_event(monitor) & HANDSHAKE_FAILED
    assert pull.poll(0) == 0
    for s in (stranger, monitor, pull):
        s.close(0)


def test_another_experiments_process_is_refused(keys: curve.CurveKeys) -> None:
    pull, addr, monitor = _server()
    theirs = curve.generate()
    stranger = _raw_push(
        addr,
        CURVE_SERVERKEY=theirs.public,
        CURVE_PUBLICKEY=theirs.public,
        CURVE_SECRETKEY=theirs.secret,
    )
    stranger.send(b"experience", zmq.NOBLOCK)
    assert _next_event(monitor) & HANDSHAKE_FAILED
    assert pull.poll(0) == 0
    for s in (stranger, monitor, pull):
        s.close(0)


def test_a_member_gives_nothing_to_a_fake_server(keys: curve.CurveKeys) -> None:
    """The other direction: a stranger's bound socket (a fake shard or parameter server) gets
    no request from a member, which demands the experiment's server key."""
    fake = context().socket(zmq.PULL)
    fake.setsockopt(zmq.LINGER, 0)
    port = fake.bind_to_random_port("tcp://127.0.0.1")
    monitor = fake.get_monitor_socket(HANDSHAKE_FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
    member = make_socket(zmq.PUSH, connect=f"tcp://127.0.0.1:{port}")
    with contextlib.suppress(zmq.Again):
        member.send(b"sample request", zmq.NOBLOCK)
    assert _next_event(monitor) & HANDSHAKE_FAILED
    assert fake.poll(0) == 0
    for s in (member, monitor, fake):
        s.close(0)


def test_a_socket_bound_after_it_was_made_can_be_a_curve_server(keys: curve.CurveKeys) -> None:
    pull = make_socket(zmq.PULL, curve_server=True)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    assert pull.getsockopt(zmq.CURVE_SERVER) == 1
    push = make_socket(zmq.PUSH, connect=f"tcp://127.0.0.1:{port}")
    push.send(b"x")
    assert pull.poll(WAIT_MS) and pull.recv() == b"x"
    for s in (push, pull):
        s.close(0)


def test_maxmsgsize_keeps_its_meaning_under_curve(keys: curve.CurveKeys) -> None:
    """A frame at the limit passes encrypted (libzmq counts the 33 bytes CURVE adds); one byte
    more disconnects its sender, as in plain text."""
    pull, addr = bind_any_port(zmq.PULL, max_msg_bytes=1000)
    push = make_socket(zmq.PUSH, connect=addr)
    push.send(b"a" * 1000)
    assert pull.poll(WAIT_MS) and len(pull.recv()) == 1000
    events = push.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    push.send(b"b" * 1001)
    assert events.poll(WAIT_MS)  # the server hung up on it
    assert pull.poll(0) == 0
    for s in (events, push, pull):
        s.close(0)


def test_a_pod_private_address_is_plain_and_only_loopback_may_be(keys: curve.CurveKeys) -> None:
    """Issue 25 item 2: a hop inside one pod (its loopback) skips CURVE, every other socket of
    the process keeps it; an address other pods could reach is never let off."""
    wildcard = "tcp://127.0.0.1:*"
    curve.pod_private(wildcard)
    assert not curve.secures(wildcard) and curve.secures("tcp://127.0.0.1:1")
    inside = make_socket(zmq.PULL, bind=wildcard, max_msg_bytes=100)
    addr = bound_address(inside)
    assert inside.getsockopt(zmq.MAXMSGSIZE) == 100  # no encryption overhead to allow for
    monitor = inside.get_monitor_socket(HANDSHAKE_FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
    plain = _raw_push(addr)  # another container of the pod, keys or not
    plain.send(b"batch")
    assert _next_event(monitor) == zmq.EVENT_HANDSHAKE_SUCCEEDED
    assert inside.poll(WAIT_MS) and inside.recv() == b"batch"
    inside.disable_monitor()
    for s in (plain, monitor, inside):
        s.close(0)
    curve.install(keys)  # a role's start: what was declared before is forgotten
    assert curve.secures(wildcard)
    guarded, guarded_addr, guarded_monitor = _server()  # a cluster endpoint: CURVE as before
    stranger = _raw_push(guarded_addr)
    assert _next_event(guarded_monitor) & HANDSHAKE_FAILED
    guarded.disable_monitor()
    for s in (stranger, guarded_monitor, guarded):
        s.close(0)
    for outside in ("tcp://0.0.0.0:7021", "tcp://10.0.0.7:7021", "tcp://exp-ps.ns.svc:7021"):
        with pytest.raises(ValueError, match="not a loopback address"):
            curve.pod_private(outside)
        assert curve.secures(outside)


def test_a_role_declares_its_pod_endpoints_and_refuses_one_off_loopback(
    tmp_path: Path, keys: curve.CurveKeys
) -> None:
    env = _role_env(
        tmp_path,
        SURREAL_ROLE="ps",
        SURREAL_POD_ENDPOINTS="ps-backend",
        SURREAL_PS_BACKEND_BIND="tcp://127.0.0.1:7021",
        SURREAL_PS_SERVE_BIND="tcp://0.0.0.0:7020",
    )
    ctx = RoleContext.from_env(env)
    assert not curve.secures(ctx.bind("ps-backend"))
    assert curve.secures(ctx.bind("ps-serve"))
    wrong = RoleContext.from_env({**env, "SURREAL_PS_BACKEND_BIND": "tcp://0.0.0.0:7021"})
    with pytest.raises(RuntimeRoleError, match=r"SURREAL_PS_BACKEND_BIND.*not a loopback"):
        wrong.bind("ps-backend")


def test_without_installed_keys_sockets_are_plain() -> None:
    before = curve.installed()
    curve.install(None)
    try:
        sock = make_socket(zmq.PULL, bind="tcp://127.0.0.1:*")
        assert sock.getsockopt(zmq.MECHANISM) == zmq.NULL
        sock.close(0)
    finally:
        curve.install(before)


def test_the_local_key_file_is_what_comm_reads_and_private(tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    folder.mkdir(mode=0o700)
    path = write_keys(folder)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = curve.load_key_file(path)
    assert zmq.curve_public(loaded.secret) == loaded.public
    assert loaded.secret.decode() not in repr(loaded)  # never in a log line
    assert write_keys(folder) != loaded or curve.load_key_file(path) != loaded  # fresh per create


def test_key_files_open_to_others_or_broken_are_refused(tmp_path: Path) -> None:
    path = write_keys(tmp_path)
    os.chmod(path, 0o644)
    with pytest.raises(curve.CurveKeyError, match="open to other users"):
        curve.load_key_file(path)
    assert curve.load_key_file(path, private=False)  # a Secret's mount: the pod's alone
    a, b = curve.generate(), curve.generate()
    (tmp_path / "mixed").write_text(
        f'{{"public": "{a.public.decode()}", "secret": "{b.secret.decode()}"}}'
    )
    os.chmod(tmp_path / "mixed", 0o600)
    with pytest.raises(curve.CurveKeyError, match="does not belong"):
        curve.load_key_file(tmp_path / "mixed")
    with pytest.raises(curve.CurveKeyError, match="does not exist"):
        curve.load_key_file(tmp_path / "absent")


def _role_env(folder: Path, **extra: str) -> dict[str, str]:
    return {
        "SURREAL_EXPERIMENT": "exp",
        "SURREAL_ROLE": "learner",
        "SURREAL_CONFIG": str(folder / "config.yml"),
        "SURREAL_EXPERIMENT_DIR": str(folder),
        **extra,
    }


def test_a_role_finds_its_key_file(tmp_path: Path) -> None:
    before = curve.installed()
    try:
        ctx = RoleContext.from_env(_role_env(tmp_path))
        assert ctx.curve_key_file is None
        assert ctx.install_curve() is None and curve.installed() is None
        path = write_keys(tmp_path)
        assert ctx.curve_key_file == (path, True)
        assert ctx.install_curve() == curve.load_key_file(path) == curve.installed()
        mounted = RoleContext.from_env(_role_env(tmp_path, SURREAL_CURVE_KEYS=str(tmp_path / "no")))
        with pytest.raises(RuntimeRoleError, match="does not exist"):
            mounted.install_curve()  # named but missing: fail at start, never serve everyone
    finally:
        curve.install(before)


@pytest.mark.parametrize("hwm", [1, 2])
def test_a_receiver_with_a_tiny_high_water_mark_still_gets_messages(
    keys: curve.CurveKeys, hwm: int
) -> None:
    """Before: pyzmq's ZAP handler answered with a user id, libzmq queued a credential message
    in the receiver's only slot(s), and an experience receiver (RCVHWM 1) never saw a message:
    `poll` said readable, `recv` found nothing."""
    pull, addr = bind_any_port(zmq.PULL, rcvhwm=hwm)
    push = make_socket(zmq.PUSH, connect=addr, sndhwm=1)
    push.send_multipart([b"header", b"x" * 1000])
    assert pull.poll(WAIT_MS)
    assert pull.recv_multipart(zmq.NOBLOCK) == [b"header", b"x" * 1000]
    for s in (push, pull):
        s.close(0)
