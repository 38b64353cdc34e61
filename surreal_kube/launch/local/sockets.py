"""Where a local run's processes meet: Unix sockets in a folder only its user can enter.

Every ZeroMQ endpoint of a local run is `ipc://<run folder>/<endpoint>`, a Unix socket in a
folder made fresh for each run (0700). The kernel refuses `connect` to a socket in a folder the
caller may not search, before a byte is exchanged: another user of the machine cannot reach a
single endpoint, whatever the socket file's own mode. That is what CURVE was doing over
127.0.0.1 TCP, where every user reaches every port, at the price of encrypting each frame
(the comm rows of docs/benchmarks.md: CURVE about two thirds of plain TCP's speed on the
experience path and the 1 MB broadcast; the pyzmq wheel's libsodium is the ceiling). Here the
check is made once, at `connect`, and costs nothing per message: Unix sockets are faster than
plain TCP on both paths. A process of the same user gains nothing from CURVE either: it may read a
key file and ptrace the roles. So a local run writes no key file; on Kubernetes, where other
pods share the network, every socket stays TCP with CURVE (`launch/kube/render/curve.py`).

TensorBoard keeps a 127.0.0.1 TCP port: a browser speaks HTTP over TCP, and what it serves is
read-only.

A fresh run folder per run (a random name): a leftover process of an earlier run of the same
experiment dials paths that are gone, as a fresh keypair per create did. The run folder is
`<experiment>/sockets/<run>`; where that path is too long for a socket (a Unix socket's path
holds 107 bytes, `SOCKET_PATH_MAX`), it is `<run>` in the user's own `surreal-kube-<uid>` folder
of the temporary directory, refused when another user made that folder or opened it. Only when
even that does not fit is the experiment refused, before anything is written. The state file
names the run folder; the supervisor removes it when it stops, `delete` and the next run of the
same name what a killed supervisor left.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surreal_kube.errors import LaunchError
from surreal_kube.experiment.topology import SOCKET_PATH_MAX, Address, Topology, endpoint
from surreal_kube.launch.local.ports import allocate_ports

SOCKETS = "sockets"
"""The experiment folder's sub-folder of run folders."""


def tcp_endpoints(topology: Topology) -> list[str]:
    """The endpoints a local run serves on TCP: those a browser reaches (TensorBoard)."""
    return sorted(n for n in topology.binders if endpoint(n).protocol == "http")


def _longest_socket_name(topology: Topology) -> int:
    return max((len(n) for n in topology.binders if endpoint(n).protocol == "zmq"), default=0)


def _fits(folder: Path, topology: Topology) -> bool:
    return len(str(folder)) + 1 + _longest_socket_name(topology) <= SOCKET_PATH_MAX


def user_base() -> Path:
    """This user's folder of run folders in the temporary directory (for deep experiment
    folders): `surreal-kube-<uid>`."""
    return Path(tempfile.gettempdir()) / f"surreal-kube-{os.getuid()}"


def _check_private(path: Path) -> None:
    """Refuse a folder another user made, or one open to others (a squatter could list or
    replace our sockets there)."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise LaunchError(f"{path} is not a folder; remove it, or set TMPDIR to a folder of yours")
    if info.st_uid != os.getuid():
        raise LaunchError(
            f"{path} belongs to uid {info.st_uid}, not to you (uid {os.getuid()}): another "
            "user made it; remove it, or set TMPDIR to a folder of yours"
        )
    if info.st_mode & 0o077:
        raise LaunchError(
            f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):04o}); "
            "`chmod 700` it, or set TMPDIR to a folder of yours"
        )


@dataclass(frozen=True)
class Wiring:
    """How one run's processes reach each other: Unix sockets in `sockets`, TCP ports on
    127.0.0.1 for what a browser reaches."""

    sockets: Path
    ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def plan(cls, experiment_dir: Path, topology: Topology, avoid: set[int]) -> Wiring:
        """A fresh run folder's path (nothing created) and free TCP ports, none in `avoid`.

        Raises LaunchError, before anything is written, when no run folder fits a socket path
        or the temporary directory's user folder is not ours alone."""
        run = secrets.token_hex(4)
        folder = experiment_dir / SOCKETS / run
        if not _fits(folder, topology):
            base = user_base()
            folder = base / run
            if not _fits(folder, topology):
                raise LaunchError(
                    f"the experiment's socket paths would not fit a Unix socket's "
                    f"{SOCKET_PATH_MAX} bytes, neither under {experiment_dir} nor under "
                    f"{base.parent}: use a shorter --root (or name), or set TMPDIR to a "
                    "shorter folder"
                )
            if base.exists() or base.is_symlink():
                _check_private(base)
        return cls(folder, allocate_ports(tcp_endpoints(topology), avoid))

    def addresses(self, topology: Topology) -> dict[str, Address]:
        """Every endpoint's address."""
        return topology.addresses_local(self.ports, socket_dir=str(self.sockets))

    def create(self) -> None:
        """Make the run folder (0700; its parent too, checked to be ours alone)."""
        parent = self.sockets.parent
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if parent.name != SOCKETS:  # the temporary directory's user folder: anyone may squat
            _check_private(parent)
        self.sockets.mkdir(mode=0o700, exist_ok=True)
        self.sockets.chmod(0o700)

    def remove(self) -> None:
        """Remove the run folder and what is left in it (sockets of roles that died)."""
        shutil.rmtree(self.sockets, ignore_errors=True)

    def state(self) -> dict[str, Any]:
        """What the state file keeps of it."""
        return {"ports": dict(self.ports), "sockets": str(self.sockets)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Wiring:
        """The wiring a state file names (the detached supervisor reads it)."""
        return cls(Path(state["sockets"]), {k: int(v) for k, v in state["ports"].items()})


def remove_earlier_runs(experiment_dir: Path, state: Mapping[str, Any]) -> None:
    """Remove the run folders that earlier runs of this experiment left (a killed supervisor
    removes nothing): every one under the experiment folder, and the one its state names."""
    shutil.rmtree(experiment_dir / SOCKETS, ignore_errors=True)
    named = state.get("sockets")
    if isinstance(named, str) and Path(named).parent == user_base():
        shutil.rmtree(named, ignore_errors=True)
