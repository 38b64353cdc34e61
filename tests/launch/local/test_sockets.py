"""A local run's endpoints are Unix sockets in a folder only its user can enter (issue 25).

Before: every endpoint was TCP on 127.0.0.1, which every user of the machine reaches, so every
socket had to be CURVE (a key file in the experiment folder), paying per frame to encrypt.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from surreal_kube.comm.sockets import make_socket
from surreal_kube.errors import LaunchError
from surreal_kube.experiment.resolve import default_document, validate_document
from surreal_kube.launch.keys import KEY_FILE, write_keys
from surreal_kube.launch.local import backend
from surreal_kube.launch.local.folder import read_json
from surreal_kube.launch.local.sockets import SOCKETS, Wiring, user_base

EXP = validate_document(default_document("wired", "ppo"))


@pytest.fixture
def short() -> Iterator[Path]:
    """A folder of a short path (pytest's tmp_path is too long to hold the sockets' paths)."""
    path = Path(tempfile.mkdtemp(prefix="sk-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _connects_as_nobody(path: str) -> str:
    """Connect to the Unix socket `path` from a child running as `nobody`: what it met."""
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no ZeroMQ here (forked from a process with a context)
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
            said = b"connected"
        except OSError as exc:
            said = type(exc).__name__.encode()
        os.write(write, said)
        os._exit(0)
    os.close(write)
    said = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    return said


@pytest.mark.skipif(os.geteuid() != 0, reason="needs to become another user")
def test_another_user_is_refused_by_the_run_folder_alone(short: Path) -> None:
    _, _, wiring, _ = backend.prepare(EXP, root=short / "root")
    assert wiring.sockets.is_relative_to(short)
    address = wiring.addresses(EXP.topology)["ps-serve"].bind
    server = make_socket(zmq.REP, bind=address)
    try:
        path = address.removeprefix("ipc://")
        os.chmod(path, 0o777)  # the socket file open to all: the folder alone must refuse
        assert _connects_as_nobody(path) == "PermissionError"
        # the control: the same kind of socket in a folder others may enter
        open_folder = Path(tempfile.mkdtemp(prefix="sk-open-", dir="/tmp"))
        try:
            os.chmod(open_folder, 0o755)
            control = make_socket(zmq.REP, bind=f"ipc://{open_folder}/ps-serve")
            try:
                os.chmod(open_folder / "ps-serve", 0o777)
                assert _connects_as_nobody(str(open_folder / "ps-serve")) == "connected"
            finally:
                control.close(0)
        finally:
            for leftover in open_folder.iterdir():
                leftover.unlink()
            open_folder.rmdir()
    finally:
        server.close(0)


def test_create_writes_no_key_file_and_a_private_run_folder_each_time(short: Path) -> None:
    root = short / "root"
    _, folder, first, _ = backend.prepare(EXP, root=root)
    write_keys(folder.path)  # as a run of an earlier version left it
    assert first.sockets.parent == folder.path / SOCKETS and first.sockets.is_dir()
    for path in (folder.path, first.sockets):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    state = read_json(folder.state)
    assert state["sockets"] == str(first.sockets) and set(state["ports"]) == {"tensorboard"}
    book = first.addresses(EXP.topology)
    assert book["ps-serve"].connect == f"ipc://{first.sockets}/ps-serve"
    assert book["tensorboard"].connect == f"http://127.0.0.1:{first.ports['tensorboard']}"

    _, again, second, _ = backend.prepare(EXP, root=root, replace=True)
    assert second.sockets != first.sockets and second.sockets.is_dir()
    assert not first.sockets.exists()  # an earlier run's folder: a leftover dials nothing
    assert not (again.path / KEY_FILE).exists()


def test_a_deep_root_runs_its_sockets_in_the_users_temporary_folder(tmp_path: Path) -> None:
    root = tmp_path / ("deep-" * 12)
    _, folder, wiring, _ = backend.prepare(EXP, root=root)
    try:
        assert wiring.sockets.parent == user_base() and wiring.sockets.is_dir()
        assert stat.S_IMODE(user_base().stat().st_mode) == 0o700
        assert read_json(folder.state)["sockets"] == str(wiring.sockets)
        server = make_socket(zmq.REP, bind=wiring.addresses(EXP.topology)["replay-sampler"].bind)
        server.close(0)
        backend.delete("wired", root)  # as after a supervisor that was killed
        assert not wiring.sockets.exists() and not folder.path.exists()
    finally:
        wiring.remove()


def test_a_user_folder_another_user_could_enter_is_refused(
    tmp_path: Path, short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    squatted = user_base()
    squatted.mkdir(parents=True)
    os.chmod(squatted, 0o777)
    root = tmp_path / ("deep-" * 12)
    with pytest.raises(LaunchError, match=r"is open to other users \(mode 0777\)"):
        backend.prepare(EXP, root=root)
    assert not root.exists() or not any(root.iterdir())  # nothing written
    if os.geteuid() == 0:
        os.chmod(squatted, 0o700)
        os.chown(squatted, pwd.getpwnam("nobody").pw_uid, -1)
        with pytest.raises(LaunchError, match="another user made it"):
            backend.prepare(EXP, root=root)
    assert list(squatted.iterdir()) == []


def test_sockets_that_fit_nowhere_are_refused_with_nothing_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / ("t" * 90)))
    root = tmp_path / ("deep-" * 12)
    with pytest.raises(LaunchError, match="would not fit a Unix socket's 107 bytes") as err:
        backend.prepare(EXP, root=root)
    assert "TMPDIR" in str(err.value) and str(root / "wired") in str(err.value)
    assert not root.exists() or not any(root.iterdir())
    assert not Path(tempfile.gettempdir()).exists()


def test_the_key_file_is_what_the_roles_read(tmp_path: Path) -> None:
    """The Kubernetes Secret's format (launch writes it, comm reads it)."""
    from surreal_kube.comm import curve

    path = write_keys(tmp_path)
    assert curve.KEY_FILE == KEY_FILE and stat.S_IMODE(path.stat().st_mode) == 0o600
    keys = curve.load_key_file(path)
    assert keys.secret.decode() not in repr(keys)


def test_wiring_round_trips_through_the_state_file(tmp_path: Path) -> None:
    wiring = Wiring.plan(tmp_path / "exp", EXP.topology, set())
    assert Wiring.from_state(wiring.state()) == wiring
