"""The progress channel to the API server: tensorplex's figures into `<exp>-progress`.

Why tensorplex: it already receives every role's scalars (learner iteration and env steps, the
agents' steps/s, eval returns), so no other pod needs an identity. It is the only pod of an
experiment that mounts a token: the ServiceAccount `<exp>-reporter`, whose Role allows `get` and
`patch` on the one ConfigMap `<exp>-progress` (by resourceNames) and nothing else. A JSON merge
patch needs neither `update` nor `create` (the renderer creates the object, without data).

The write is a plain HTTPS PATCH (`http.client`, no `kubernetes` client in the role): the API
server's address comes the in-cluster way (KUBERNETES_SERVICE_HOST / _PORT), the token, CA and
namespace from the projected volume at SURREAL_REPORTER_DIR (the token file is read on every
write: the kubelet rotates it). The token is never logged. It runs on a thread of its own, every
`PERIOD` seconds, so a slow API server never stalls the metrics. Without an API server, a token or
the right (a local run, a revoked Role), it says so in one log line and then stays silent.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from surreal_kube.experiment import progress

log = logging.getLogger(__name__)

PERIOD = 5.0
"""Seconds between two writes: `status` is at most this much behind."""
RATE_FRESH_SECONDS = 30.0
"""An agent's steps/s older than this no longer counts (its pod went away)."""
TIMEOUT = 5.0
CONFIGMAP_VAR = "SURREAL_PROGRESS_CONFIGMAP"
DIR_VAR = "SURREAL_REPORTER_DIR"
LEARNER_ITERATION = "learner/iteration"
LEARNER_PUBLISHED = "learner/published_iteration"
LEARNER_ITERATIONS_PER_S = "learner/iterations_per_s"
AGENT_STEPS_PER_S = "agent/env_steps_per_s"
EVAL_RETURN = "charts/eval_return"
LEARNER_FINISHED = "learner/finished"
"""A learner that ended its budget sends 1 here: the record's state becomes `finished` (and the
experiment's phase Succeeded)."""


class ProgressTracker:
    """Keeps the newest figures out of the scalars tensorplex receives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.iteration: int | None = None
        self.env_steps: int | None = None
        self.iterations_per_s: float | None = None
        self.last_return: float | None = None
        self._return_time = -1.0
        self._agent_rates: dict[int, tuple[float, float]] = {}
        self.state = progress.STATE_STARTING

    def observe(
        self,
        source: str,
        group: str | None,
        index: int | None,
        step: int | None,
        stamp: float,
        values: Mapping[str, float],
    ) -> None:
        """One validated scalars message (tensorplex.parse_scalars' fields)."""
        with self._lock:
            if source == "learner":
                iteration = values.get(LEARNER_ITERATION, values.get(LEARNER_PUBLISHED))
                if iteration is not None and iteration >= 0:
                    self.iteration = max(self.iteration or 0, int(iteration))
                    if self.state != progress.STATE_FINISHED:
                        self.state = progress.STATE_RUNNING
                if step is not None:
                    self.env_steps = max(self.env_steps or 0, step)
                if LEARNER_ITERATIONS_PER_S in values:
                    self.iterations_per_s = values[LEARNER_ITERATIONS_PER_S]
                if values.get(LEARNER_FINISHED, 0.0) >= 1.0:
                    self.state = progress.STATE_FINISHED
            if group == "agents" and index is not None and AGENT_STEPS_PER_S in values:
                self._agent_rates[index] = (values[AGENT_STEPS_PER_S], time.monotonic())
            if EVAL_RETURN in values and stamp >= self._return_time:
                self.last_return, self._return_time = values[EVAL_RETURN], stamp

    def record(self) -> progress.Record:
        """The record to write now."""
        now = time.monotonic()
        with self._lock:
            fresh = [r for r, t in self._agent_rates.values() if now - t <= RATE_FRESH_SECONDS]
            return progress.Record(
                state=self.state,
                iteration=self.iteration,
                env_steps=self.env_steps,
                env_steps_per_s=round(sum(fresh), 3) if fresh else None,
                iterations_per_s=(
                    None if self.iterations_per_s is None else round(self.iterations_per_s, 3)
                ),
                last_return=self.last_return,
                updated_at=round(time.time(), 3),
            )


class ConfigMapWriter:
    """Writes a record into one ConfigMap with a JSON merge patch over HTTPS."""

    def __init__(self, host: str, port: int, namespace: str, name: str, secrets: Path) -> None:
        self.host, self.port = host, port
        self.path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        self.where = f"{namespace}/{name}"
        self.secrets = secrets
        self._context = ssl.create_default_context(cafile=str(secrets / "ca.crt"))

    @classmethod
    def in_cluster(cls, environ: Mapping[str, str] | None = None) -> ConfigMapWriter | None:
        """The writer the pod's environment describes, or None (with one log line) when the
        process runs without the channel: no ConfigMap named, no API server, no token."""
        env = os.environ if environ is None else environ
        name, folder = env.get(CONFIGMAP_VAR), env.get(DIR_VAR)
        if not name or not folder:
            return None  # not on Kubernetes with a reporter: nothing to say
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        secrets = Path(folder)
        try:
            namespace = (secrets / "namespace").read_text().strip()
            if not host or not port:
                raise OSError("KUBERNETES_SERVICE_HOST/PORT are not set")
            return cls(host, int(port), namespace, name, secrets)
        except (OSError, ValueError, ssl.SSLError) as exc:
            log.warning("progress is not reported to the API server: %s", exc)
            return None

    def write(self, text: str) -> None:
        """PATCH the record in; raises OSError (network) or PermissionError / LookupError."""
        token = (self.secrets / "token").read_text().strip()
        body = json.dumps({"data": {progress.DATA_KEY: text}})
        conn = http.client.HTTPSConnection(
            self.host, self.port, timeout=TIMEOUT, context=self._context
        )
        try:
            conn.request(
                "PATCH",
                self.path,
                body=body,
                headers={
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/merge-patch+json",
                    "Accept": "application/json",
                },
            )
            resp = conn.getresponse()
            resp.read()
        finally:
            conn.close()
        if resp.status in (401, 403):
            raise PermissionError(f"the API server refused the write ({resp.status})")
        if resp.status == 404:
            raise LookupError(f"no ConfigMap {self.where}")
        if resp.status >= 300:
            raise OSError(f"the API server answered {resp.status} {resp.reason}")


class Reporter:
    """Every `period` seconds, the tracker's record to the writer, on a daemon thread."""

    def __init__(
        self, tracker: ProgressTracker, writer: ConfigMapWriter, *, period: float = PERIOD
    ) -> None:
        self.tracker, self.writer, self.period = tracker, writer, period
        self.writes = 0
        self.failures = 0
        self._complained = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-reporter", daemon=True)

    def start(self) -> None:
        """Begin writing."""
        log.info("reporting progress to ConfigMap %s every %.0fs", self.writer.where, self.period)
        self._thread.start()

    def write_once(self) -> bool:
        """Write the current record; False (said once in the log) when it could not."""
        try:
            self.writer.write(self.tracker.record().to_json())
        except (OSError, PermissionError, LookupError, ssl.SSLError) as exc:
            self.failures += 1
            if not self._complained:
                self._complained = True
                log.warning("cannot report progress to %s: %s", self.writer.where, exc)
            return False
        if self._complained:
            log.info("progress reported to %s again", self.writer.where)
            self._complained = False
        self.writes += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.write_once()

    def stop(self) -> None:
        """Stop the thread and write a last record saying the writer stopped."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(TIMEOUT * 2)
        with self.tracker._lock:
            if self.tracker.state != progress.STATE_FINISHED:
                self.tracker.state = progress.STATE_STOPPED
        self.write_once()
