"""Which parts of the spec each component reads, and a digest of exactly those parts.

Every role reads the whole resolved spec from one ConfigMap, but only at start. A spec edit must
therefore restart the processes whose behaviour it changes, and only those: a new eval episode
count must not restart a learner that is three hours into its run. The renderer stamps each pod
template with the digest of what its component reads (`config_digest`), so Kubernetes rolls
exactly the workloads whose digest changed, and `changed_components` says which, and why.

`resources`, `images` and `placement` are not listed: they are part of the pod template itself,
so changing them rolls the pods without a digest (`queue` is the operator's alone: no role
reads it). `agents.count` and `evals.count` are left out
of every component but tensorplex (which sizes its aggregation and the budget's end by them, and
waits for the final evaluation by `evals.episodes` and `evals.intervalSeconds`: see
runtime/conductor.py): scaling changes the replica count of a StatefulSet and must not restart
the pods that already run, so a running agent keeps the count it started with (DDPG spreads its
exploration noise by it).

`tests/experiment/test_reads.py` checks the runtime modules against this table, so a role that
starts reading a new part of the spec without declaring it fails a test instead of silently
running with a stale value after an edit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from surreal_kube.experiment.spec import COMPONENTS, Experiment

COMPONENT_READS: dict[str, tuple[str, ...]] = {
    "learner": ("algorithm", "env", "replay", "session"),
    "agent": ("algorithm", "env", "agents", "ps", "replay", "session"),
    "eval": ("algorithm", "env", "agents", "evals", "ps", "session"),
    "replay": ("algorithm", "env", "replay", "session"),
    "ps": ("ps", "session"),
    "tensorplex": (
        "agents.count",
        "agents.batch",
        "evals.count",
        "evals.episodes",
        "evals.intervalSeconds",
        "session",
    ),
    "loggerplex": ("session",),
    "tensorboard": ("session",),
    "replay-shard": ("algorithm", "env", "replay", "session"),
    "ps-shard": ("ps", "session"),
}
"""Sections of `spec` (or `section.field`) each component's processes read."""

SCALE_FIELDS: dict[str, str] = {"agents": "count", "evals": "count"}
"""Replica counts: applied by scaling a StatefulSet, never by restarting its pods."""
LAYOUT_FIELDS: dict[str, str] = {"replay": "layout", "ps": "layout"}
"""Whether shards are containers or pods: it decides the objects, not what a process does (a
shard reads its addresses from its environment), so like `resources` it is in no digest: a
changed layout is new workloads, and a new field's default changes no running pod's digest."""

assert set(COMPONENT_READS) == set(COMPONENTS), "every component declares what it reads"


def read_sections(exp: Experiment, component: str) -> dict[str, Any]:
    """The parts of the spec `component` reads, as plain JSON-compatible values."""
    spec = exp.spec.model_dump(by_alias=False, mode="json")
    out: dict[str, Any] = {}
    for entry in COMPONENT_READS[component]:
        section, _, field = entry.partition(".")
        value = spec[section]
        if field:
            value = value[_snake(field)]
        else:
            left_out = (SCALE_FIELDS.get(section), LAYOUT_FIELDS.get(section))
            value = {k: v for k, v in value.items() if k not in left_out}
        out[entry] = value
    return out


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def config_digest(exp: Experiment, component: str) -> str:
    """A short, stable digest of what `component` reads (12 hex characters)."""
    text = json.dumps(read_sections(exp, component), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def changed_components(old: Experiment, new: Experiment) -> dict[str, list[str]]:
    """Components whose processes must restart to see `new`, each with the sections that changed."""
    out: dict[str, list[str]] = {}
    present = {g.component for e in (old, new) for g in e.topology.groups}
    for component in (c for c in COMPONENTS if c in present):
        before, after = read_sections(old, component), read_sections(new, component)
        changed = sorted(s for s in after if before.get(s) != after[s])
        if changed:
            out[component] = changed
    return out


def describe_changes(changes: Mapping[str, list[str]]) -> str:
    """One line for people: which components restart and why, learner first."""
    order = sorted(changes, key=lambda c: (c != "learner", COMPONENTS.index(c)))
    return "; ".join(f"{c} ({', '.join(changes[c])} changed)" for c in order)
