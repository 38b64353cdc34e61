"""The progress record: one definition of the keys that say how far a running experiment got.

Two writers and several readers share these keys, so they are spelled here once:

- the roles' progress files (runtime/status.py, the local backend) use `ITERATION` (the learner)
  and `LAST_RETURN` (evals) for the same figures;
- on Kubernetes, tensorplex (which already receives every role's metrics) sends a compact
  `Record` every few seconds into the experiment's progress ConfigMap `<exp>-progress`
  (runtime/reporter.py); `status`, `list` and the operator read it back
  (launch/kube/status/progress.py) into the Experiment status and its printer columns.

A record is JSON, small (a few hundred bytes), and every field may be null: what was not reported
yet stays null, nothing is invented. Unknown keys are ignored, so a newer writer may add some.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

SCHEMA = 1
DATA_KEY = "progress.json"
"""The key of the record in the progress ConfigMap's `data`."""

# The keys, shared with runtime/status.py's progress files (same names, same meaning).
STATE = "state"
ITERATION = "iteration"
"""Learner iterations so far (the global step, restored from checkpoints)."""
ENV_STEPS = "env_steps"
"""Environment steps of all agents together, as the learner last saw them."""
ENV_STEPS_PER_S = "env_steps_per_s"
ITERATIONS_PER_S = "iterations_per_s"
LAST_RETURN = "last_return"
"""Mean return of the newest evaluation."""
RECENT_EVALUATIONS = "recent_evaluations"
"""An evaluator's latest evaluations, oldest first (runtime/eval.py), each numbered
(`evaluation`, counted over the evaluator's restarts) with its `return`, `std`, `episodes`,
`param_version`, `param_env_steps` and `taken_at`: an evaluator that plays a backlog of
snapshots finishes several between two reads of its progress file."""
UPDATED_AT = "updated_at"
REASON = "reason"
"""Why the record is in its state, one line (set when the run finished: which budget)."""
STARTED_AT = "started_at"
"""Unix time the experiment started, as its first tensorplex saw it: kept across tensorplex
restarts (read back from the record), shown; the time budget counts `ELAPSED`."""
ELAPSED = "elapsed_seconds"
"""Seconds the run has run, counted on tensorplex's monotonic clock and carried over its
restarts (read back from the record): what `session.maxTimeSeconds` counts, so a step of the wall
clock neither ends a run nor lengthens it."""
FINISHED_AT = "finished_at"
MAX_REASON = 300

STATE_STARTING = "starting"
"""No learner figure received yet."""
STATE_RUNNING = "running"
STATE_STOPPED = "stopped"
"""The writer stopped (its pod shut down); the figures are the last ones it saw."""
STATE_FINISHED = "finished"
"""The run reached its budget, was evaluated a last time and its results were written: the
experiment Succeeded (tensorplex then releases its compute, runtime/conductor.py)."""
STATES = (STATE_STARTING, STATE_RUNNING, STATE_STOPPED, STATE_FINISHED)
MAX_BYTES = 4096
"""A record larger than this is not a record (the reader ignores it)."""


@dataclass
class Record:
    """How far the experiment got, as last reported."""

    state: str = STATE_STARTING
    iteration: int | None = None
    env_steps: int | None = None
    env_steps_per_s: float | None = None
    iterations_per_s: float | None = None
    last_return: float | None = None
    updated_at: float | None = None
    reason: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    elapsed_seconds: float | None = None
    schema: int = SCHEMA

    def to_json(self) -> str:
        """Compact, sorted JSON (the ConfigMap value)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def new_evaluations(data: Mapping[str, Any], after: int) -> list[dict[str, Any]]:
    """The evaluations an evaluator's progress file lists that are numbered above `after`, in
    its order, with `evaluation` an int and `return` a float; an entry without a number or a
    finite return is skipped: what the reader cannot place on a curve is not a point."""
    out = []
    for rec in data.get(RECENT_EVALUATIONS) or []:
        if not isinstance(rec, dict):
            continue
        number, score = _int(rec.get("evaluation")), _float(rec.get("return"))
        if number is not None and number > after and score is not None:
            out.append({**rec, "evaluation": number, "return": score})
    return out


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    line = " ".join(value.split())
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 3] + "..."


def from_mapping(data: Mapping[str, Any]) -> Record:
    """A record from any mapping with these keys (a progress file, a decoded ConfigMap value);
    values of the wrong type become null."""
    state = data.get(STATE)
    return Record(
        state=state if isinstance(state, str) and state in STATES else STATE_STARTING,
        iteration=_int(data.get(ITERATION)),
        env_steps=_int(data.get(ENV_STEPS)),
        env_steps_per_s=_float(data.get(ENV_STEPS_PER_S)),
        iterations_per_s=_float(data.get(ITERATIONS_PER_S)),
        last_return=_float(data.get(LAST_RETURN)),
        updated_at=_float(data.get(UPDATED_AT)),
        reason=_text(data.get(REASON)),
        started_at=_float(data.get(STARTED_AT)),
        finished_at=_float(data.get(FINISHED_AT)),
        elapsed_seconds=_seconds(data.get(ELAPSED)),
    )


def _seconds(value: Any) -> float | None:
    seconds = _float(value)
    return seconds if seconds is not None and seconds >= 0 else None


def parse(text: str | None) -> Record | None:
    """The record in a ConfigMap value, or None when absent, too large or not a JSON object."""
    if not text or len(text) > MAX_BYTES:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return from_mapping(data) if isinstance(data, dict) else None


def from_configmap(obj: Mapping[str, Any] | None) -> Record | None:
    """The record held by a progress ConfigMap (None: no object, or nothing written yet)."""
    if not obj:
        return None
    return parse((obj.get("data") or {}).get(DATA_KEY))
