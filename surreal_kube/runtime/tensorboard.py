"""Role `tensorboard`: serves `<experiment>/tensorboard` with TensorBoard on its bound address.

TensorBoard runs as a child process (it owns its own threads and signal handling); this role
forwards SIGTERM to it and exits with it, so a crashed TensorBoard is restarted by the backend.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from urllib.parse import urlparse

from surreal_kube.errors import RuntimeRoleError
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.lifecycle import StopFlag

log = logging.getLogger(__name__)


def parse_bind(bind: str) -> tuple[str, int]:
    """`http://0.0.0.0:6006` -> ("0.0.0.0", 6006)."""
    url = urlparse(bind if "://" in bind else f"http://{bind}")
    if not url.hostname or not url.port:
        raise RuntimeRoleError(f"tensorboard bind address {bind!r} needs a host and a port")
    return url.hostname, url.port


class TensorboardRole(RoleBase):
    """Role `tensorboard`."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        self.host, self.port = parse_bind(ctx.bind("tensorboard"))
        self.logdir = ctx.folder("tensorboard")
        self.child: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The TensorBoard command line."""
        return [
            sys.executable, "-m", "tensorboard.main",
            "--logdir", str(self.logdir),
            "--host", self.host,
            "--port", str(self.port),
            "--reload_interval", "5",
        ]  # fmt: skip

    def run(self) -> None:
        """Start TensorBoard and wait for it or for the stop signal."""
        log.info("tensorboard on http://%s:%d serving %s", self.host, self.port, self.logdir)
        self.child = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)
        while not self.stop.wait(0.5):
            code = self.child.poll()
            if code is not None:
                raise RuntimeRoleError(f"tensorboard exited with code {code}")

    def close(self) -> None:
        """Stop TensorBoard (SIGTERM, then SIGKILL after 5 s)."""
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(5)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait(5)
        super().close()
