"""Kubernetes Events on an Experiment: every phase change and every refusal, as `kubectl describe`
and `kubectl get events` show them beside the pods' own.

kopf posts events only for its handlers' outcomes (a warning when one fails), which say what
broke inside the operator, not what happened to the experiment. A platform team reads Events to
learn that an experiment became Running, Queued behind another, Failed, or was refused (its
reason: InvalidSpec, NotOurs, WaitingForCapacity, ...), with the same words as the status.

Repeats are one Event counted up, as the kubelet's are: an Event's name is the experiment's and
a digest of its reason and message, so a refusal retried every minute is "x12 over 11m", not
twelve objects. Events are best effort: a failure to post one is logged, never raised.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from surreal_kube.launch.kube.api.client import (
    EXPERIMENT,
    ConflictError,
    Kube,
    KubeError,
    resource,
)

log = logging.getLogger(__name__)

EVENT = resource("v1", "Event")
COMPONENT = "surreal-kube-operator"
MAX_MESSAGE = 1024
"""The API server refuses longer Event messages."""
WARNING_PHASES = ("Failed",)
WARNING_REASONS = ("InvalidSpec", "Invalid", "NotOurs", "Forbidden", "WaitingForCapacity")

_counts: dict[tuple[str, str], int] = {}
_lock = threading.Lock()
_instance = os.environ.get("POD_NAME") or socket.gethostname()


def timestamp() -> str:
    """Now, as the API's conditions and Events write times (RFC 3339, whole seconds, UTC)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(experiment: str, reason: str, message: str) -> str:
    """`<experiment>.<digest>`: one Event per distinct reason and message."""
    digest = hashlib.sha256(f"{reason}\n{message}".encode()).hexdigest()[:16]
    return f"{experiment}.{digest}"


def record(
    kube: Kube, obj: Mapping[str, Any], reason: str, message: str, *, warning: bool = False
) -> None:
    """Post (or count up) the Event `reason: message` on the Experiment `obj`."""
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    text = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
    key = (namespace, event_name(name, reason, text))
    now = timestamp()
    with _lock:
        count = _counts.get(key, 0) + 1
        _counts[key] = count
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": key[1], "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", EXPERIMENT.api_version),
            "kind": obj.get("kind", "Experiment"),
            "name": name,
            "namespace": namespace,
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": text,
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": _instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": count,
    }
    try:
        if count == 1:
            try:
                kube.create(body, namespace)
                return
            except ConflictError:  # posted before this operator started: count it up
                pass
        kube.patch(EVENT, key[1], {"count": count, "lastTimestamp": now}, namespace)
    except KubeError as exc:
        log.warning("cannot post the event %s on %s/%s: %s", reason, namespace, name, exc)


def phase_changed(
    kube: Kube, obj: Mapping[str, Any], before: str | None, after: str, reason: str | None
) -> None:
    """The Event of a phase change (a Warning for Failed)."""
    words = f"{before or 'new'} -> {after}" + (f": {reason}" if reason else "")
    record(kube, obj, after, words, warning=after in WARNING_PHASES)


def forget(namespace: str, experiment: str) -> None:
    """Drop the counts of a deleted experiment (the API server expires its Events)."""
    with _lock:
        for key in [k for k in _counts if k[0] == namespace and k[1].startswith(experiment + ".")]:
            del _counts[key]
