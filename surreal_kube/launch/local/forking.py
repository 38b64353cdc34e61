"""The supervisor's side of the fork server: roles forked from one warm interpreter.

The server (`python -m surreal_kube.runtime.forkserver`, started as a command like every role)
imports the roles' libraries once and forks each role from there, so that eleven processes do not
import torch, MuJoCo and the spec eleven times over on a laptop's few cores. This module speaks
its JSON-lines protocol and hands the supervisor `ForkedProcess` objects that behave like the
`subprocess.Popen` objects it uses otherwise (`pid`, `poll`, `wait`, `returncode`).

A forked role's parent is the server, not the supervisor: the server exits when the supervisor's
end of its stdin closes (the supervisor stopped or died), and its roles then stop by themselves.
Set SURREAL_KUBE_FORKSERVER=0 to start every role as its own interpreter instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

ENABLE_ENV = "SURREAL_KUBE_FORKSERVER"


def enabled() -> bool:
    """Whether roles are forked from a server (default) or each started as an interpreter."""
    return os.environ.get(ENABLE_ENV, "1") not in ("0", "false", "no")


class ForkServerGoneError(RuntimeError):
    """The server is not running (any more): start the role as its own process instead."""


class ForkedProcess:
    """A role forked by the server, with the part of Popen's interface the supervisor uses."""

    def __init__(self, server: ForkServer, request_id: int, args: list[str]) -> None:
        self.server = server
        self.request_id = request_id
        self.args = args
        self._pid: int | None = None
        self.returncode: int | None = None

    @property
    def pid(self) -> int | None:
        """The role's pid; None until the server has forked it."""
        if self._pid is None and self.returncode is None:
            self.server.pump(0.0)
        return self._pid

    def poll(self) -> int | None:
        """The exit code once it ended, else None (also while the fork is pending)."""
        if self.returncode is None:
            self.server.pump(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; subprocess.TimeoutExpired after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.1 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.server.pump(min(0.1, left))
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """One experiment's fork server (see the module docstring)."""

    def __init__(self, python: str, env: dict[str, str], cwd: Path, log: Path) -> None:
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [python, "-m", "surreal_kube.runtime.forkserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=cwd,
                # Ctrl-C in the terminal is the supervisor's alone; the supervisor's session,
                # so that the roles' niceness holds (runtime.main.NICENESS)
                process_group=0,
            )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._buffer = b""
        self._next_id = 0
        self._pending: dict[int, ForkedProcess] = {}
        self._running: dict[int, ForkedProcess] = {}
        self.gone = False

    @property
    def pid(self) -> int:
        """The server's own pid."""
        return self.proc.pid

    def spawn(
        self, args: list[str], *, env: dict[str, str], cwd: Path, out: Path, heavy: bool
    ) -> ForkedProcess:
        """Ask for a role (`args` as for surreal-kube-role); its pid arrives with `pump`."""
        if self.gone or self.proc.poll() is not None:
            self.gone = True
            raise ForkServerGoneError("the fork server is not running")
        self._next_id += 1
        child = ForkedProcess(self, self._next_id, args)
        request = {
            "id": child.request_id,
            "argv": args,
            "env": env,
            "cwd": str(cwd),
            "out": str(out),
            "heavy": heavy,
            "name": env.get("SURREAL_PROCESS", args[0]),
        }
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError) as exc:
            self.gone = True
            raise ForkServerGoneError(f"the fork server is not running ({exc})") from exc
        self._pending[child.request_id] = child
        return child

    def pump(self, timeout: float) -> None:
        """Read what the server reported (forks, exits), waiting up to `timeout` for it."""
        if self.gone:
            self._check_orphans()
            return
        readable, _, _ = select.select([self._out], [], [], max(0.0, timeout))
        if not readable:
            return
        try:
            chunk = os.read(self._out, 65536)
        except BlockingIOError:
            return
        if not chunk:
            self.gone = True
            self._check_orphans()
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self._dispatch(json.loads(line))

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "exit" in message:
            child = self._running.pop(int(message["exit"]), None)
            if child is not None:
                child.returncode = int(message["code"])
        elif "id" in message:
            child = self._pending.pop(int(message["id"]), None)
            if child is None:
                return
            if "pid" in message:
                child._pid = int(message["pid"])
                self._running[child._pid] = child
            else:
                child.returncode = 1  # could not fork: the supervisor restarts it
                child.args = [*child.args, f"(fork failed: {message.get('error')})"]

    def _check_orphans(self) -> None:
        """The server died: its pending forks never happen, its roles stop by themselves."""
        for child in self._pending.values():
            child.returncode = 1
        self._pending.clear()
        for pid, child in list(self._running.items()):
            if not _alive(pid):
                child.returncode = 1  # its exit code went to the server, which is gone
                del self._running[pid]

    def settle(self, timeout: float) -> None:
        """Wait until every requested fork happened (or `timeout`), so each role has a pid."""
        deadline = time.monotonic() + timeout
        while self._pending and not self.gone and time.monotonic() < deadline:
            self.pump(0.1)

    def close(self, timeout: float = 10.0) -> None:
        """Let the server exit (its stdin closes) and reap it; kill it if it lingers."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            self.proc.stdout.close()  # type: ignore[union-attr]
        self.gone = True
        self._check_orphans()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False
