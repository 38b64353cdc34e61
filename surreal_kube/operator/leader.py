"""Leader election: of the operator's replicas, the one holding a Lease reconciles; the others
wait to take it over.

A Lease (`coordination.k8s.io/v1`) in the operator's namespace, as client-go's leader election
keeps one: the holder renews it every `renew_every` seconds; a replica that sees the same
record unchanged for `lease_seconds` (by its own monotonic clock, so no two nodes' wall clocks
are compared) takes it over, with the record's resourceVersion as the precondition, so two
replicas can never both win. A holder that cannot renew within `lease_seconds` stops
reconciling (its process ends, the Deployment restarts it as a standby) before anyone else may
take over. A replica that stops on purpose (SIGTERM: an upgrade, a drain) releases the Lease,
and the standby takes over at its next try instead of after a whole lease.

Why not kopf's peering: it pauses operators of lower priority while a higher one runs, through
two cluster-wide CRDs of its own; a Lease is the object every Kubernetes controller already
uses, needs only `leases` in one namespace, and shows its holder to `kubectl get lease`.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from surreal_kube.launch.kube.api.client import (
    ConflictError,
    Kube,
    KubeError,
    NotFoundError,
    resource,
)

log = logging.getLogger(__name__)

LEASE = resource("coordination.k8s.io/v1", "Lease")
LEASE_NAME = "surreal-kube-operator"


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElection:
    """Acquire, keep and release the operator's Lease (see the module docstring)."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        *,
        name: str = LEASE_NAME,
        lease_seconds: float = 15.0,
        renew_every: float = 2.0,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self._seen: tuple[str, float] | None = None
        """(resourceVersion of the record last seen, monotonic time it was first seen)."""
        self._renewed = 0.0
        self._stop = threading.Event()

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Block until this replica holds the Lease (True), or `stop` is set (False)."""
        waiting_logged = False
        while not (stop is not None and stop.is_set()):
            try:
                if self._try():
                    log.info(
                        "leader: %s holds lease %s/%s", self.identity, self.namespace, self.name
                    )
                    return True
            except KubeError as exc:
                log.warning("leader election: %s", exc)
            if not waiting_logged:
                log.info("leader: waiting for lease %s/%s", self.namespace, self.name)
                waiting_logged = True
            time.sleep(self.renew_every)
        return False

    def keep(self, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew the Lease from a daemon thread; `on_lost()` once it cannot be kept."""

        def run() -> None:
            while not self._stop.wait(self.renew_every):
                try:
                    if self._try():
                        continue
                    log.error("leader: lease %s taken by another replica", self.name)
                except KubeError as exc:
                    if time.monotonic() - self._renewed < self.lease_seconds:
                        log.warning("leader: cannot renew the lease yet: %s", exc)
                        continue
                    log.error("leader: lease not renewed for %.0f s: %s", self.lease_seconds, exc)
                on_lost()
                return

        thread = threading.Thread(target=run, name="leader-lease", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Give the Lease up (a stop on purpose), so a standby takes over at once."""
        self._stop.set()
        try:
            lease = self.kube.get(LEASE, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            self.kube.patch(
                LEASE,
                self.name,
                {
                    "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                    "spec": {"holderIdentity": None, "leaseDurationSeconds": 1},
                },
                self.namespace,
            )
            log.info("leader: released lease %s/%s", self.namespace, self.name)
        except KubeError as exc:  # it expires on its own
            log.warning("leader: cannot release the lease: %s", exc)

    # -- one try

    def _try(self) -> bool:
        """One attempt to take or renew the Lease: True when this replica holds it after."""
        try:
            lease = self.kube.get(LEASE, self.name, self.namespace)
        except NotFoundError:
            return self._create()
        spec = lease.get("spec") or {}
        version = lease["metadata"]["resourceVersion"]
        holder = spec.get("holderIdentity") or ""
        now = time.monotonic()
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, now)  # a change: its age counts from now, on our clock
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        mine = holder == self.identity
        expired = now - self._seen[1] >= duration
        if not (mine or not holder or expired):
            return False
        stamp = _micro_now()
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": version},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "renewTime": stamp,
            },
        }
        if not mine:
            patch["spec"]["acquireTime"] = stamp
            patch["spec"]["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            self.kube.patch(LEASE, self.name, patch, self.namespace)
        except ConflictError:
            return False  # someone else wrote it first: look again at the next try
        self._renewed = now
        return True

    def _create(self) -> bool:
        stamp = _micro_now()
        body = {
            "apiVersion": LEASE.api_version,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            self.kube.create(body, self.namespace)
        except ConflictError:
            return False
        self._renewed = time.monotonic()
        return True


@contextmanager
def standby_health(endpoint: str | None) -> Iterator[None]:
    """Answer the liveness endpoint (`http://HOST:PORT/PATH`, kopf's once it runs) while this
    replica waits for the Lease: a standby is alive, and its probe must not restart it."""
    if not endpoint:
        yield
        return
    url = urlsplit(endpoint)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == (url.path or "/") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 8080), Handler)
    thread = threading.Thread(target=server.serve_forever, name="standby-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()  # the port is kopf's next
