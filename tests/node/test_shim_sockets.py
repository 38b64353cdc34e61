"""The node's sweep of dead shim sockets spares the live shims of every other node.

containerd-shim-runc-v2 puts its socket in one fixed directory for the whole host
(/run/containerd/s), while each test node runs containerd and its shims in a network
namespace of its own. /proc/net/unix lists only the reader's namespace, so a sweep that read
liveness there took another node's live sockets for dead and unlinked them: that node's
containerd could no longer reach its shims ("failed to load sandbox task ... dial unix
/run/containerd/s/...: no such file"), its pods crash-looped, and an end-to-end run that
shared the machine with a node test (`make test` runs them side by side) waited out its timeout.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import node

LISTEN = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(8)
print("listening", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def shim_dir() -> Iterator[Path]:
    """The host's shim socket directory, made if absent and removed again if this made it."""
    made = [d for d in (node.SHIM_SOCKETS.parent, node.SHIM_SOCKETS) if not d.exists()]
    node.SHIM_SOCKETS.mkdir(parents=True, exist_ok=True)
    yield node.SHIM_SOCKETS
    for d in reversed(made):
        with contextlib.suppress(OSError):  # another test's node put sockets there meanwhile
            d.rmdir()


def test_a_shim_listening_in_another_network_namespace_is_kept(shim_dir: Path) -> None:
    live = shim_dir / f"sk-test-live-{uuid.uuid4().hex[:12]}"
    dead = shim_dir / f"sk-test-dead-{uuid.uuid4().hex[:12]}"
    # a shim of another node: listening, in a network namespace of its own
    other = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", LISTEN, str(live)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert other.stdout is not None
        assert other.stdout.readline().strip() == "listening"
        # a killed shim's socket: the file stays, nothing listens
        gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        gone.bind(str(dead))
        gone.close()

        node._remove_dead_shim_sockets()

        assert live.exists(), "a live shim of another network namespace was taken for dead"
        assert not dead.exists(), "a dead shim's socket was left"
    finally:
        other.kill()
        other.wait()
        live.unlink(missing_ok=True)
        dead.unlink(missing_ok=True)
