"""Helpers for tests on the real node (tests/cluster/node.py): pods that land on it, waits,
and a stand-in experiment record so that the CLI (`surreal-kube logs/exec/tb`) finds pods.

test_runtime_image.py (the runtime image) uses these with the `real_node` fixture too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from surreal_kube.experiment.resolve import default_document
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import Kube, resource
from surreal_kube.launch.kube.render.objects import CONFIG_KEY
from tests.cluster import images, node

POD = resource("v1", "Pod")
SERVICE = resource("v1", "Service")
CONFIG_MAP = resource("v1", "ConfigMap")


def wait_for(
    what: str, probe: Callable[[], Any], timeout: float = 120.0, every: float = 0.3
) -> Any:
    """probe()'s first truthy value; AssertionError naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def real_pod(
    name: str,
    command: Sequence[str],
    image: str = images.TEST_IMAGE,
    container: str = "main",
    labels: Mapping[str, str] | None = None,
    ports: Sequence[int] = (),
    restart: str = "Never",
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod for the real node: its pool's selector, its taint's toleration, an imported image."""
    spec_container: dict[str, Any] = {
        "name": container,
        "image": image,
        "imagePullPolicy": "Never",
        "command": list(command),
        "ports": [{"containerPort": p} for p in ports],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 2,
            "nodeSelector": {"cloud.google.com/gke-nodepool": node.NODE_POOL},
            "tolerations": [dict(node.REAL_NODE_TOLERATION)],
            "containers": [spec_container],
        },
    }


def pod_phase(kube: Kube, name: str) -> str | None:
    pod = kube.get_or_none(POD, name, kube.namespace)
    return None if pod is None else (pod.get("status") or {}).get("phase")


def wait_running(kube: Kube, name: str, timeout: float = 120.0) -> dict[str, Any]:
    """The pod once Running with every container ready (its events in the failure message)."""

    def ready() -> dict[str, Any] | None:
        pod = kube.get_or_none(POD, name, kube.namespace)
        status = (pod or {}).get("status") or {}
        conditions = status.get("conditions") or []
        if status.get("phase") == "Running" and any(
            c["type"] == "Ready" and c["status"] == "True" for c in conditions
        ):
            return pod
        if status.get("phase") in ("Failed", "Succeeded"):
            raise AssertionError(f"pod {name} ended {status.get('phase')}: {status}")
        return None

    try:
        return wait_for(f"pod {name} Running", ready, timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\nevents: {events_of(kube, name)}") from None


def wait_finished(kube: Kube, name: str, timeout: float = 120.0) -> str:
    """The pod's final phase (Succeeded or Failed)."""
    return wait_for(
        f"pod {name} to finish",
        lambda: pod_phase(kube, name) if pod_phase(kube, name) in ("Succeeded", "Failed") else None,
        timeout,
    )


def pod_log(kube: Kube, name: str) -> str:
    """The pod's log as text (through the API server and the kubelet)."""
    text = kube.raw("GET", POD.path(kube.namespace, name, "log"))
    return "" if text is None else text if isinstance(text, str) else json.dumps(text)


def finished_log(kube: Kube, name: str, timeout: float = 30.0) -> str:
    """The whole log of a pod that has finished: what it printed, once it is all there.

    containerd's CRI marks a container exited without waiting for the goroutine that copies its
    output into the log file, so a log read as the phase turns Succeeded can still be empty
    (CI read "" where the pod had printed "kept"). Each caller's pod prints something, so the
    log is taken once it is not empty and two reads half a second apart agree."""
    last = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = pod_log(kube, name)
        if text and text == last:
            return text
        last = text
        time.sleep(0.5)
    return last


def events_of(kube: Kube, name: str) -> list[str]:
    events = kube.raw(
        "GET",
        f"/api/v1/namespaces/{kube.namespace}/events",
        query={"fieldSelector": f"involvedObject.name={name}"},
    )
    return [f"{e.get('reason')}: {e.get('message')}" for e in events.get("items", [])]


def experiment_record(kube: Kube, name: str) -> None:
    """The ConfigMap by which the CLI finds an experiment named `name` (its default spec), so
    that `surreal-kube logs/exec/tb NAME PROCESS` reach pods labelled as that process's group
    (experiment_labels). The pods themselves are the test's."""
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": naming.config_name(name),
                "labels": {naming.EXPERIMENT_LABEL: name},
            },
            "data": {CONFIG_KEY: yaml.safe_dump(default_document(name))},
        }
    )


def experiment_labels(name: str, group: str) -> dict[str, str]:
    return naming.selector_labels(name, group)
