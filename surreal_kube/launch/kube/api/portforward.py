"""Port-forward through the API server: a local TCP port that reaches a port of a pod.

`Forwarder` listens on 127.0.0.1 and, for every connection it accepts, opens one port-forward
stream (a websocket to the pod's `portforward` subresource, through the API server and the
kubelet) and copies bytes both ways until either side closes. This is what `surreal-kube tb`
uses to show the experiment's TensorBoard at http://127.0.0.1:<port>/, with no kubectl.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from typing import Any

from surreal_kube.errors import LaunchError
from surreal_kube.launch.kube.api.client import Kube

log = logging.getLogger(__name__)


class Forwarder:
    """Forward 127.0.0.1:<local_port> to <pod>:<remote_port>; use as a context manager."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        pod: str,
        remote_port: int,
        local_port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.pod = pod
        self.remote_port = remote_port
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._server.bind((host, local_port))
        except OSError as e:
            self._server.close()
            raise LaunchError(
                f"cannot listen on {host}:{local_port} ({e.strerror}); pick another --port"
            ) from e
        self._server.listen(16)
        self.host = host
        self.local_port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="port-forward", daemon=True)
        self.errors: list[str] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.local_port}/"

    def start(self) -> Forwarder:
        self._check()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._server.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Forwarder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait(self) -> None:
        """Block until stopped (Ctrl-C)."""
        while not self._stop.wait(0.5):
            pass

    def _open(self) -> Any:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        core = client.CoreV1Api(self.kube.api)
        try:
            return portforward(
                core.connect_get_namespaced_pod_portforward,
                self.pod,
                self.namespace,
                ports=str(self.remote_port),
            )
        except ApiException as e:
            raise LaunchError(
                f"cannot port-forward to {self.pod}:{self.remote_port}: {e.reason}"
            ) from e

    def _check(self) -> None:
        """Open (and close) one stream first, so a refusal is an error, not a silent hang."""
        pf = self._open()
        pf.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            pf = self._open()
        except LaunchError as e:
            self.errors.append(str(e))
            log.warning("%s", e)
            conn.close()
            return
        remote = pf.socket(self.remote_port)
        remote.setblocking(True)
        try:
            _pipe(conn, remote, self._stop)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            pf.close()
            error = pf.error(self.remote_port)
            if error:
                self.errors.append(error)
                log.warning("port-forward to %s:%s: %s", self.pod, self.remote_port, error)


def _pipe(a: socket.socket, b: Any, stop: threading.Event) -> None:
    """Copy bytes both ways until one side closes."""
    socks = [a, b]
    while not stop.is_set():
        readable, _, _ = select.select(socks, [], [], 0.5)
        for s in readable:
            try:
                data = s.recv(65536)
            except OSError:
                return
            if not data:
                return
            other = b if s is a else a
            try:
                other.sendall(data)
            except OSError:
                return
