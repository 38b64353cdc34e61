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

The same thread conducts the run's end on a cluster (runtime/conductor.py): after each write it
lets the conductor check the budget, and the writer's other calls serve it: `read` (the record
as a restarted tensorplex finds it: the start time and whether the run already finished),
`patch_configmap` (the results ConfigMap `<exp>-results`) and `scale_to_zero` (the experiment's
workloads, through their `scale` subresource). The Role allows exactly these, by resourceNames.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from surreal_kube.experiment import progress

log = logging.getLogger(__name__)

PERIOD = 5.0
"""Seconds between two writes: `status` is at most this much behind."""
RATE_FRESH_SECONDS = 30.0
"""An agent's steps/s older than this no longer counts (its pod went away)."""
TIMEOUT = 5.0
RESTART_GAP_MAX = 300.0
"""Seconds between a previous tensorplex's last record and this one's start that count as run
time, at most (the run went on meanwhile; a wall clock stepped in that gap adds no more)."""
CONFIGMAP_VAR = "SURREAL_PROGRESS_CONFIGMAP"
DIR_VAR = "SURREAL_REPORTER_DIR"
RESULTS_VAR = "SURREAL_RESULTS_CONFIGMAP"
"""The ConfigMap the results are copied into (set by the renderer with the reporter's rights)."""
WORKLOADS_VAR = "SURREAL_RELEASE_WORKLOADS"
"""`deployments/<name>,statefulsets/<name>,...`: what tensorplex scales to 0 when the run
ends, in that order (its own Deployment last); exactly the Role's resourceNames."""
LEARNER_ITERATION = "learner/iteration"
LEARNER_PUBLISHED = "learner/published_iteration"
LEARNER_ITERATIONS_PER_S = "learner/iterations_per_s"
AGENT_STEPS_PER_S = "agent/env_steps_per_s"
EVAL_RETURN = "charts/eval_return"
LEARNER_FINISHED = "learner/finished"
"""A learner that ended its budget sends 1 here: the record's state becomes `finished` (and the
experiment's phase Succeeded)."""
AGENT_ENV_STEPS = "agent/env_steps"
"""An agent process's cumulative env steps: their sum over processes is the global env steps,
exactly (the learner's figure comes from replay and lags the last partial sub-trajectories)."""
AGENT_BUDGET_DONE = "agent/budget_done"
"""1 once every agent of the process took its share of `session.maxEnvSteps`."""


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
        self.reason: str | None = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.published: int | None = None
        """The newest parameter version the learner said it published."""
        self.agent_steps: dict[str, int] = {}
        """Agent process -> its cumulative env steps (AGENT_ENV_STEPS), earlier pods included."""
        self._agent_reported: dict[str, tuple[int, int]] = {}
        """Agent process -> (steps of its earlier pods, the newest figure its pod reported)."""
        self.agents_done: set[str] = set()
        self.learner_values: dict[str, float] = {}
        """The learner's newest scalars (policy lag and replay figures for the summary)."""
        self.finished_before = False
        """The record said finished when this tensorplex started: a restart after the end."""
        self._elapsed_before = 0.0
        """Run time of earlier tensorplexes (from the record), see `elapsed`."""
        self._started_mono: float | None = None

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
                if LEARNER_PUBLISHED in values and values[LEARNER_PUBLISHED] >= 0:
                    self.published = max(self.published or 0, int(values[LEARNER_PUBLISHED]))
                self.learner_values.update(values)
                if LEARNER_ITERATIONS_PER_S in values:
                    self.iterations_per_s = values[LEARNER_ITERATIONS_PER_S]
                if values.get(LEARNER_FINISHED, 0.0) >= 1.0:
                    self.state = progress.STATE_FINISHED
            if group == "agents" and index is not None and AGENT_STEPS_PER_S in values:
                self._agent_rates[index] = (values[AGENT_STEPS_PER_S], time.monotonic())
            if group == "agents" and AGENT_ENV_STEPS in values:
                self.agent_steps[source] = self._agent_total(source, int(values[AGENT_ENV_STEPS]))
                self.env_steps = max(self.env_steps or 0, sum(self.agent_steps.values()))
            if group == "agents" and values.get(AGENT_BUDGET_DONE, 0.0) >= 1.0:
                self.agents_done.add(source)
            if EVAL_RETURN in values and stamp >= self._return_time:
                self.last_return, self._return_time = values[EVAL_RETURN], stamp

    def _agent_total(self, source: str, steps: int) -> int:
        """An agent process's steps, earlier pods included.

        An agent keeps its cumulative count in its status file, which survives a container
        restart but not a replaced pod (emptyDir): the new pod counts from 0 again. Without
        this, its steps were ignored until they passed the old pod's and the step budget
        overshot by that much. A figure under half the previous one is a new pod (a report
        that merely arrives late differs by one report interval).
        """
        base, last = self._agent_reported.get(source, (0, 0))
        if steps < last // 2:
            base += last
        elif steps < last:
            steps = last  # late, not new
        self._agent_reported[source] = (base, steps)
        return base + steps

    def record(self) -> progress.Record:
        """The record to write now."""
        now = time.monotonic()
        elapsed = self.elapsed()
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
                reason=self.reason,
                started_at=self.started_at,
                finished_at=self.finished_at,
                elapsed_seconds=None if elapsed is None else round(elapsed, 3),
            )

    def elapsed(self) -> float | None:
        """Seconds the run has run (earlier tensorplexes included), on the monotonic clock;
        None until `restore` says where the count starts."""
        if self._started_mono is None:
            return None
        return self._elapsed_before + time.monotonic() - self._started_mono

    def agents(self) -> tuple[int, int]:
        """(env steps of every agent process together, agent processes done), consistent."""
        with self._lock:
            return sum(self.agent_steps.values()), len(self.agents_done)

    def learner_figures(self) -> dict[str, float]:
        """A copy of the learner's newest scalars."""
        with self._lock:
            return dict(self.learner_values)

    def finish(self, reason: str, final_return: float | None) -> None:
        """The run ended (the conductor wrote its results): state `finished`, with the reason."""
        with self._lock:
            self.state = progress.STATE_FINISHED
            self.reason = reason
            self.finished_at = round(time.time(), 3)
            if final_return is not None:
                self.last_return = final_return

    def restore(self, record: progress.Record | None, now: float) -> None:
        """What a previous tensorplex wrote survives a restart: the start time (the time budget
        counts from it) and a finished state with its reason; figures come back with metrics."""
        with self._lock:
            self.started_at = record.started_at if record and record.started_at else round(now, 3)
            self._started_mono = time.monotonic()
            self._elapsed_before = _elapsed_before(record, now)
            if record is None:
                return
            # figures no one sends any more (the run finished, its roles are gone) stay shown
            if self.iteration is None:
                self.iteration = record.iteration
            if self.env_steps is None:
                self.env_steps = record.env_steps
            if self.last_return is None:
                self.last_return = record.last_return
            if record.state == progress.STATE_FINISHED:
                self.finished_before = True
                self.state = progress.STATE_FINISHED
                self.reason, self.finished_at = record.reason, record.finished_at


def _elapsed_before(record: progress.Record | None, now: float) -> float:
    """The run time a restarted tensorplex takes over: the record's count plus the gap since it
    was written (at most RESTART_GAP_MAX); from the start time for a record without a count."""
    if record is None:
        return 0.0
    if record.elapsed_seconds is not None:
        gap = now - record.updated_at if record.updated_at is not None else 0.0
        return record.elapsed_seconds + min(max(gap, 0.0), RESTART_GAP_MAX)
    if record.started_at is not None:  # written before the count existed
        return max(now - record.started_at, 0.0)
    return 0.0


class ConfigMapWriter:
    """Writes a record into one ConfigMap with a JSON merge patch over HTTPS."""

    def __init__(self, host: str, port: int, namespace: str, name: str, secrets: Path) -> None:
        self.host, self.port = host, port
        self.namespace = namespace
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
        self._request("PATCH", self.path, {"data": {progress.DATA_KEY: text}}, self.where)

    def read(self) -> progress.Record | None:
        """The record as it is now (None: nothing written yet); raises like `write`."""
        body = self._request("GET", self.path, None, self.where)
        return progress.from_configmap(json.loads(body or b"{}"))

    def patch_configmap(self, name: str, body: Mapping[str, object]) -> None:
        """JSON merge patch of another ConfigMap of the experiment (its results)."""
        path = self.path.rsplit("/", 1)[0] + f"/{name}"
        self._request("PATCH", path, body, f"{self.namespace}/{name}")

    def scale_to_zero(self, workload: str) -> None:
        """`deployments/<name>` or `statefulsets/<name>` to 0 replicas (its scale subresource)."""
        plural, _, name = workload.partition("/")
        path = f"/apis/apps/v1/namespaces/{self.namespace}/{plural}/{name}/scale"
        self._request("PATCH", path, {"spec": {"replicas": 0}}, f"{self.namespace}/{workload}")

    def _request(
        self, method: str, path: str, body: Mapping[str, object] | None, what: str
    ) -> bytes:
        token = (self.secrets / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/merge-patch+json"
        conn = http.client.HTTPSConnection(
            self.host, self.port, timeout=TIMEOUT, context=self._context
        )
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
        finally:
            conn.close()
        if resp.status in (401, 403):
            raise PermissionError(f"the API server refused {method} {what} ({resp.status})")
        if resp.status == 404:
            raise LookupError(f"no {what}")
        if resp.status >= 300:
            raise OSError(f"the API server answered {resp.status} {resp.reason} to {what}")
        return answer


class Reporter:
    """Every `period` seconds, the tracker's record to the writer, on a daemon thread.

    Before its first write it reads the record back (`restore`): a restarted tensorplex keeps the
    experiment's start time and a finished state instead of overwriting them. `conductor`, when
    given, runs after each write on the same thread (runtime/conductor.py).
    """

    def __init__(
        self,
        tracker: ProgressTracker,
        writer: ConfigMapWriter,
        *,
        period: float = PERIOD,
        conductor: Callable[[], None] | None = None,
    ) -> None:
        self.tracker, self.writer, self.period = tracker, writer, period
        self.conductor = conductor
        self.restored = False
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

    def restore(self) -> bool:
        """Read the record a previous tensorplex left; False (said once) when it could not."""
        try:
            record = self.writer.read()
        except LookupError:
            record = None  # no ConfigMap yet: the writes will say so
        except (OSError, PermissionError, ssl.SSLError, ValueError) as exc:
            self.failures += 1
            if not self._complained:
                self._complained = True
                log.warning("cannot read the progress record %s: %s", self.writer.where, exc)
            return False
        self.tracker.restore(record, time.time())
        self.restored = True
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            if not self.restored and not self.restore():
                continue
            self.write_once()
            if self.conductor is not None:
                try:
                    self.conductor()
                except Exception:  # the conductor's trouble must not end the progress channel
                    log.exception("the conductor failed; it tries again in %.0fs", self.period)

    def stop(self) -> None:
        """Stop the thread and write a last record saying the writer stopped."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(TIMEOUT * 2)
        if not self.restored:
            return  # never read what is there: writing now could erase a start time
        with self.tracker._lock:
            if self.tracker.state != progress.STATE_FINISHED:
                self.tracker.state = progress.STATE_STOPPED
        self.write_once()
