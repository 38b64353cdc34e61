"""Free ports on 127.0.0.1 that no other local experiment holds.

The kernel hands out a free port for a socket bound to port 0; we record every port we give out in
the experiment's state file and hold a lock over the whole root while choosing, so two experiments
started at the same moment never receive the same port.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path

from surreal_kube.launch.local.folder import read_json


@contextlib.contextmanager
def root_lock(root: Path) -> Iterator[None]:
    """Exclusive lock over the experiments root (port choice and name reservation).

    The lock is taken on the root folder itself, not on a lock file in it, so nothing is left
    behind in the root (a `.lock` next to the experiments looked like a stray file).
    """
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def ports_in_use_by_experiments(root: Path, exclude: str | None = None) -> set[int]:
    """Ports recorded by the other experiments under `root` that may still be running."""
    used: set[int] = set()
    if not root.is_dir():
        return used
    for state_file in root.glob("*/state.json"):
        if state_file.parent.name == exclude:
            continue
        state = read_json(state_file) or {}
        if state.get("phase") in ("Succeeded", "Failed", "Stopped"):
            continue
        used.update(int(p) for p in (state.get("ports") or {}).values())
    return used


def allocate_ports(
    names: Iterable[str], avoid: set[int], host: str = "127.0.0.1"
) -> dict[str, int]:
    """One free port per name, none in `avoid`, all distinct."""
    chosen: dict[str, int] = {}
    held: list[socket.socket] = []
    try:
        for name in names:
            for _ in range(100):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind((host, 0))
                port = s.getsockname()[1]
                held.append(s)  # keep it bound so the next pick differs
                if port not in avoid:
                    chosen[name] = port
                    break
            else:  # pragma: no cover - would need 100 consecutive collisions
                raise OSError(f"no free port found for {name}")
    finally:
        for s in held:
            s.close()
    return chosen


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on host:port (used to check a clean shutdown)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
