"""Free TCP ports on 127.0.0.1 for tests that must know an address before binding it."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nobody listens on right now (the kernel's choice for an ephemeral bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_addr() -> str:
    """`tcp://127.0.0.1:<free port>`."""
    return f"tcp://127.0.0.1:{free_port()}"
