"""Role `loggerplex`: gathers every role's log lines into one file per component.

Files: `<experiment>/logs/<process>.log` (the local backend keeps each process's raw stdout in
`<process>.out` next to them). Lines arrive already formatted (see `runtime.logs`); each is written
as received, in arrival order, and files are flushed every second and on SIGTERM.

Only the experiment's own processes (the topology's names) have a file: a record from any other
source is dropped and counted, so a stranger cannot make files of its choosing. A file that
reaches `MAX_FILE_BYTES` is rotated (`<process>.log.1`, ... up to `BACKUPS`), so the folder holds
at most processes x (BACKUPS + 1) x MAX_FILE_BYTES, however much a role (or a peer) logs.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import drain, make_socket, take_waiting
from surreal_kube.runtime.base import RoleBase, topology_sources
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.lifecycle import Every, StopFlag

log = logging.getLogger(__name__)

_SOURCE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MAX_OPEN_FILES = 128
MAX_LINE = 64 * 1024
MAX_FILE_BYTES = 32 << 20
BACKUPS = 2


class LogFiles:
    """Append-only files per source, at most MAX_OPEN_FILES open at once (least recent closed)."""

    def __init__(
        self, folder: Path, *, max_bytes: int = MAX_FILE_BYTES, backups: int = BACKUPS
    ) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.backups = backups
        self.rotations = 0
        self._open: OrderedDict[str, IO[str]] = OrderedDict()

    def path(self, source: str) -> Path:
        """The file of `source`."""
        return self.folder / f"{source}.log"

    def write(self, source: str, line: str) -> None:
        """Append one line to the source's file."""
        f = self._open.get(source)
        if f is None:
            if len(self._open) >= MAX_OPEN_FILES:
                _, oldest = self._open.popitem(last=False)
                oldest.close()
            f = open(self.path(source), "a", encoding="utf-8")  # noqa: SIM115 - kept open
            self._open[source] = f
        else:
            self._open.move_to_end(source)
        f.write(line if line.endswith("\n") else line + "\n")
        if f.tell() >= self.max_bytes:
            self._rotate(source)

    def _rotate(self, source: str) -> None:
        """`<source>.log` -> `.log.1` -> ... -> `.log.<backups>` (the oldest dropped)."""
        self._open.pop(source).close()
        path = self.path(source)
        for i in range(self.backups, 0, -1):
            older = path.with_name(f"{path.name}.{i - 1}") if i > 1 else path
            if older.exists():
                older.replace(path.with_name(f"{path.name}.{i}"))
        path.unlink(missing_ok=True)  # backups=0: the file starts over
        self.rotations += 1

    def flush(self) -> None:
        """Flush every open file."""
        for f in self._open.values():
            f.flush()

    def close(self) -> None:
        """Close every file."""
        for f in self._open.values():
            f.close()
        self._open.clear()


class LoggerplexRole(RoleBase):
    """Role `loggerplex`: PULL log records, write one file per component."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        # records travel in the header only (comm.metrics): nothing larger is a log record
        self.sock = make_socket(
            zmq.PULL,
            bind=ctx.bind("loggerplex"),
            rcvhwm=10_000,
            max_msg_bytes=wire.MAX_HEADER_BYTES,
        )
        self.sources = topology_sources(ctx)
        self.files = LogFiles(ctx.folder("logs"))
        self.rejects = wire.Rejects(log)
        self.lines = 0

    def handle(self, frames: list[Any]) -> None:
        """Validate one record and append it to its component's file."""
        msg = wire.try_decode(
            frames, self.rejects, expect=(wire.LOG,), max_bytes=0, where="loggerplex"
        )
        if msg is None:
            return
        src, line = msg.meta.get("src"), msg.meta.get("msg")
        if not isinstance(src, str) or not _SOURCE.match(src) or not isinstance(line, str):
            self.rejects.add(
                wire.WireError("bad-meta", "log record needs src and msg"), "loggerplex"
            )
            return
        if src not in self.sources:
            self.rejects.add(
                wire.WireError("unknown-source", f"{src!r} is not a process of this experiment"),
                "loggerplex",
            )
            return
        self.files.write(src, line[:MAX_LINE])
        self.lines += 1

    def run(self) -> None:
        """Receive until stopped."""
        log.info("loggerplex writing to %s", self.files.folder)
        flush = Every(1.0)
        while not self.stop.is_set():
            if self.sock.poll(100, zmq.POLLIN):
                take_waiting(self.sock, self.handle)
            if flush():
                self.files.flush()

    def close(self) -> None:
        """Write what was sent before the stop, then close the files and the socket."""
        drain(self.sock, self.handle)
        self.files.close()
        self.sock.close(0)
        super().close()
