"""The end of a run on a cluster: budget, final evaluation, results, Succeeded, compute released.

Locally the supervisor ends a run (launch/local/supervisor.py). Pods have no supervisor and run
forever unless someone stops them, so on Kubernetes tensorplex conducts the end: it already
receives every role's metrics and is the one pod with an identity (runtime/reporter.py). It works
the same with and without the operator: everything it needs is in the metrics, the progress
record and the rights its Role grants.

1. The curve, as evaluations arrive: one point per evaluator's evaluation, the same fields as a
   local curve (session/results.py), appended to `results/curve.jsonl` on the experiment volume.
2. The budget: global env steps >= `session.maxEnvSteps` (the sum of the agent processes' own
   cumulative steps, or every agent process saying it took its share), or the seconds the run
   has run >= `session.maxTimeSeconds`. Those are counted on the monotonic clock and kept in the
   progress record, so a restarted tensorplex goes on counting, and a step of the wall clock
   neither ends the run nor lengthens it.
3. The final evaluation: an evaluation that arrived after the budget was reached, of parameters at
   least as new as the newest the learner had published then. Evaluators are not signalled (they
   live in other pods); they evaluate every `evals.intervalSeconds`, so the wait is bounded by one
   interval plus FINAL_EVAL_TIMEOUT (the local backend's bound), after which the run ends with
   what it has. No evaluators: no wait.
4. The results: summary.json and learning_curve.png (and the curve) onto the volume and into the
   ConfigMap `<exp>-results` (binaryData for the picture), which outlives the pods: `surreal-kube
   results` fetches from there.
5. The record's state becomes `finished` with the reason: `status`, `list` and the operator say
   Succeeded from it.
6. Compute released: every workload of the experiment scaled to 0 through its `scale`
   subresource, tensorplex's own Deployment last. The volume, the results and the record stay.

Each step that talks to the API server is retried on the next tick when it fails; a step done is
not done again. A tensorplex restarted after the end (its record says finished) only releases
the compute again.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from surreal_kube.experiment import run_end
from surreal_kube.experiment.run_end import FINAL_EVAL_TIMEOUT
from surreal_kube.experiment.spec import Experiment
from surreal_kube.runtime.reporter import (
    EVAL_RETURN,
    RESULTS_VAR,
    WORKLOADS_VAR,
    ProgressTracker,
)
from surreal_kube.session import results as shared

log = logging.getLogger(__name__)

EVAL_STD = "charts/eval_return_std"
EVAL_VERSION = "eval/param_version"
# FINAL_EVAL_TIMEOUT (seconds past one evaluation interval that the final evaluation may take)
# comes from the end-of-run rule of both backends (experiment/run_end.py).
CONFIGMAP_LIMIT = 900_000
"""Bytes of results the ConfigMap holds at most (the API server's limit is 1 MiB): beyond it the
curve there keeps its newest points (the volume keeps all)."""

RUNNING, FINAL_EVAL, WRITING, RELEASING, DONE = (
    "running",
    "final-evaluation",
    "writing",
    "releasing",
    "done",
)
_ERRORS = (OSError, PermissionError, LookupError, ssl.SSLError)


class Api(Protocol):
    """What the conductor asks of the API server (runtime/reporter.py's ConfigMapWriter)."""

    def write(self, text: str) -> None: ...

    def patch_configmap(self, name: str, body: Mapping[str, object]) -> None: ...

    def scale_to_zero(self, workload: str) -> None: ...


def _param_version(progress: Mapping[str, Any]) -> int:
    """The parameter version a progress report names; -1 when it names none."""
    version = progress.get("param_version")
    return int(version) if version is not None else -1


def workloads_from_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """`deployments/<name>` ... in release order, as the renderer listed them (WORKLOADS_VAR)."""
    env = os.environ if environ is None else environ
    return [w for w in (env.get(WORKLOADS_VAR) or "").split(",") if w]


class Conductor:
    """Steps 1-6 of the module docstring. `observe` runs on tensorplex's receive loop,
    `step` on the reporter's thread (after each progress write)."""

    def __init__(
        self,
        exp: Experiment,
        tracker: ProgressTracker,
        api: Api,
        results_dir: Path,
        *,
        results_configmap: str | None,
        workloads: list[str],
    ) -> None:
        self.exp = exp
        self.name = exp.metadata.name
        self.tracker = tracker
        self.api = api
        self.results_dir = results_dir
        self.results_configmap = results_configmap
        self.workloads = workloads
        self.released: set[str] = set()
        self._lock = threading.Lock()
        self.points = shared.load_curve(results_dir / shared.CURVE)
        self.phase = RUNNING
        self.reason = ""
        self.budget_at = 0.0
        """Monotonic time the budget was reached."""
        self.wanted_version = -1
        """The learner's newest published parameters when the budget was reached."""
        self.final: dict[str, Any] | None = None
        """The final evaluation's point."""
        self._since_budget: list[tuple[float, dict[str, Any]]] = []
        self.files: dict[str, bytes] | None = None
        self._complained: set[str] = set()

    @classmethod
    def in_cluster(
        cls,
        exp: Experiment,
        tracker: ProgressTracker,
        api: Api,
        results_dir: Path,
        environ: Mapping[str, str] | None = None,
    ) -> Conductor:
        """The conductor the pod's environment describes (results ConfigMap, workloads)."""
        env = os.environ if environ is None else environ
        return cls(
            exp,
            tracker,
            api,
            results_dir,
            results_configmap=env.get(RESULTS_VAR) or None,
            workloads=workloads_from_env(env),
        )

    # ------------------------------------------------------------------ the curve

    def observe(
        self,
        source: str,
        group: str | None,
        index: int | None,
        step: int | None,
        values: Mapping[str, float],
    ) -> None:
        """One validated scalars message: an evaluation's result becomes a point of the curve."""
        if group != "evals" or EVAL_RETURN not in values:
            return
        now = time.time()
        version = values.get(EVAL_VERSION)
        point = {
            "env_steps": step if step is not None else (self.tracker.env_steps or 0),
            "wall_time": round(self.tracker.elapsed() or 0.0, 3),
            "eval_return": values[EVAL_RETURN],
            "eval_std": values.get(EVAL_STD),
            "episodes": self.exp.spec.evals.episodes,
            "param_version": None if version is None else int(version),
            "learner_iteration": self.tracker.iteration,
            "evaluations": len(self.points) + 1,
            "evaluator": index,
            "time": now,
        }
        with self._lock:
            self.points.append(point)
            if self.phase == FINAL_EVAL:
                self._since_budget.append((time.monotonic(), point))
        try:
            shared.append_point(self.results_dir / shared.CURVE, point)
        except OSError as exc:
            self._say_once("curve", f"cannot append to the curve on the volume: {exc}")

    # ------------------------------------------------------------------ the end

    def budget_reached(self) -> str | None:
        """Why the run should end now, or None (the rule of both backends, on our counts)."""
        t = self.tracker
        agent_steps, done = t.agents()
        groups = self.exp.spec.agents.groups
        return run_end.budget_reached(
            self.exp.spec.session,
            env_steps=max(agent_steps, t.env_steps or 0),
            elapsed=t.elapsed(),  # monotonic, kept over restarts
            agents_done=bool(groups) and done >= groups,
        )

    def step(self) -> None:
        """Advance as far as possible now (called every few seconds)."""
        if self.phase == RUNNING:
            if self.tracker.finished_before:  # a tensorplex restarted after the end
                self.reason = self.tracker.reason or "finished"
                self.phase = RELEASING
            else:
                reason = self.budget_reached()
                if reason is None:
                    return
                self._on_budget(reason)
        if self.phase == FINAL_EVAL and not self._final_evaluation_done():
            return
        if self.phase == WRITING and not self._write_results():
            return
        if self.phase == RELEASING:
            self._release()

    def _on_budget(self, reason: str) -> None:
        self.reason = reason
        self.budget_at = time.monotonic()
        self.wanted_version = self.tracker.published if self.tracker.published is not None else -1
        with self._lock:
            self.phase = FINAL_EVAL
        if self.exp.spec.evals.count:
            log.info(
                "%s: waiting for a final evaluation of parameters >= version %d",
                reason,
                self.wanted_version,
            )
        else:
            log.info("%s: no evaluators, so no final evaluation", reason)

    def final_eval_timeout(self) -> float:
        """How long the final evaluation may take: one interval and FINAL_EVAL_TIMEOUT."""
        return self.exp.spec.evals.interval_seconds + FINAL_EVAL_TIMEOUT

    def _final_evaluation_done(self) -> bool:
        if self.exp.spec.evals.count:
            with self._lock:
                fresh = [
                    p for _, p in self._since_budget if _param_version(p) >= self.wanted_version
                ]
            if fresh:
                self.final = fresh[-1]
                log.info(
                    "final evaluation: return %.2f (parameters of version %s)",
                    self.final["eval_return"],
                    self.final["param_version"],
                )
            elif time.monotonic() - self.budget_at < self.final_eval_timeout():
                return False
            else:
                log.warning(
                    "no final evaluation after %.0f s; the results end at the last one",
                    self.final_eval_timeout(),
                )
        self.phase = WRITING
        return True

    def summary(self) -> dict[str, Any]:
        """summary.json's document (session/results.py's format, the local one)."""
        t = self.tracker
        with self._lock:
            points = list(self.points)
        figures = t.learner_figures()
        lag = {k.split("/", 1)[1]: v for k, v in figures.items() if k.startswith("lag/")}
        replay = {k.split("/", 1)[1]: v for k, v in figures.items() if k.startswith("replay/")}
        return shared.summarize(
            points,
            name=self.name,
            phase="Succeeded",
            reason=self.reason,
            env_steps=max(t.agents()[0], t.env_steps or 0),
            elapsed=t.elapsed() or 0.0,
            learner_iteration=t.iteration or 0,
            restarts=None,  # tensorplex cannot see pod restarts; `status` shows them
            health={
                "global_env_steps": (
                    int(figures["learner/global_env_steps"])
                    if "learner/global_env_steps" in figures
                    else None
                ),
                "policy_lag": lag or None,
                "replay": replay or None,
                "agents_replay_wait_seconds": None,
            },
        )

    def _write_results(self) -> bool:
        if self.files is None:
            summary = self.summary()
            with self._lock:
                points = list(self.points)
            try:
                self.files = shared.write_files(self.results_dir, summary, points)
            except OSError as exc:  # the volume is the copy of record only where it exists
                self._say_once("volume", f"cannot write the results on the volume: {exc}")
                title = shared.title(self.name, "Succeeded", self.reason)
                self.files = {
                    shared.SUMMARY: shared.summary_text(summary).encode(),
                    shared.PICTURE: shared.picture(points, title),
                    shared.CURVE: shared.curve_text(points).encode(),
                }
            log.info("results written to %s", self.results_dir)
        if self.results_configmap:
            try:
                self.api.patch_configmap(self.results_configmap, configmap_body(self.files))
            except _ERRORS as exc:
                self._say_once("results", f"cannot write the results ConfigMap: {exc}")
                return False
            log.info("results copied into ConfigMap %s", self.results_configmap)
        final = self.final["eval_return"] if self.final else None
        self.tracker.finish(self.reason, final)
        try:
            self.api.write(self.tracker.record().to_json())
        except _ERRORS as exc:
            self._say_once("record", f"cannot write the finished record: {exc}")
            return False
        log.info("run finished (%s); releasing its compute", self.reason)
        self.phase = RELEASING
        return True

    def _release(self) -> None:
        for workload in self.workloads:
            if workload in self.released:
                continue
            try:
                self.api.scale_to_zero(workload)
            except LookupError:
                pass  # gone already (an evals StatefulSet of an edited spec): nothing to release
            except _ERRORS as exc:
                self._say_once(f"scale {workload}", f"cannot scale {workload} to 0: {exc}")
                return  # in order: tensorplex itself stays until everything else is released
            self.released.add(workload)
            log.info("scaled %s to 0", workload)
        self.phase = DONE

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._complained:
            self._complained.add(key)
            log.warning("%s (trying again)", message)


def configmap_body(files: Mapping[str, bytes]) -> dict[str, Any]:
    """The results ConfigMap's merge patch: text files in `data`, the picture in `binaryData`.

    The curve keeps its newest points when everything would not fit under CONFIGMAP_LIMIT.
    """
    summary = files[shared.SUMMARY].decode()
    picture = base64.b64encode(files[shared.PICTURE]).decode()
    curve = files[shared.CURVE].decode()
    room = CONFIGMAP_LIMIT - len(summary) - len(picture)
    if len(curve) > room:
        lines = curve.splitlines(keepends=True)
        kept: list[str] = []
        size = 0
        for line in reversed(lines):
            if size + len(line) > max(room, 0):
                break
            kept.append(line)
            size += len(line)
        log.warning(
            "the curve has %d points; the ConfigMap keeps the newest %d (the volume has all)",
            len(lines),
            len(kept),
        )
        curve = "".join(reversed(kept))
    return {
        "data": {shared.SUMMARY: summary, shared.CURVE: curve},
        "binaryData": {shared.PICTURE: picture},
    }
