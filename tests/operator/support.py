"""Helpers of the cluster tests: the CLI and the operator as real processes, waiting, snapshots."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import CRD, Kube, resource

ROOT = Path(__file__).resolve().parents[2]
IMAGES = {
    "cpu": "registry.test/surreal-kube/runtime-cpu:1",
    "gpu": "registry.test/surreal-kube/runtime-cuda:1",
}
IMAGE_ARGS = [arg for key, ref in IMAGES.items() for arg in ("--image", f"{key}={ref}")]
SPEC_IMAGES = [
    f"images.{k}.{f}={v}"
    for k, ref in IMAGES.items()
    for f, v in (("build", "null"), ("image", ref))
]
"""--set overrides that pin prebuilt images in the spec itself (for Experiment objects)."""
TINY = [
    arg
    for c in ("learner", "agent", "eval", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")
    for arg in ("--set", f"resources.{c}.cpu=10m", "--set", f"resources.{c}.memory=16Mi")
]
"""Small pods: tests share the simulated nodes, and namespaces of earlier tests may still be
terminating (their pods hold capacity until then)."""
TINY_SETS = [a for a in TINY if a != "--set"]
"""TINY as the `sets` of resolve_experiment."""
PROFILE_TEXT = "experimentVolume:\n  kind: emptyDir\n"
"""The test cluster has no storage provisioner: the experiment folder is an emptyDir."""
KINDS = [
    resource("v1", "ConfigMap"),
    resource("v1", "Service"),
    resource("v1", "ServiceAccount"),
    resource("rbac.authorization.k8s.io/v1", "Role"),
    resource("rbac.authorization.k8s.io/v1", "RoleBinding"),
    resource("apps/v1", "Deployment"),
    resource("apps/v1", "StatefulSet"),
    resource("networking.k8s.io/v1", "NetworkPolicy"),
    resource("policy/v1", "PodDisruptionBudget"),
    resource("v1", "PersistentVolumeClaim"),
    resource("v1", "Pod"),
]
APPLIED_KINDS = KINDS[:9]
"""What an experiment applies itself and `render` prints, but its volume claim (the PVC and
pods come after) and the CURVE key Secret (made at apply, never printed: lifecycle/keys.py)."""


def wait_for(
    what: str, predicate: Callable[[], Any], timeout: float = 60.0, every: float = 0.25
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def tiny_experiment(
    namespace: str, name: str, *sets: str, profile: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An Experiment object as a user applies it with kubectl: prebuilt images (SPEC_IMAGES),
    small pods (TINY), more `sets`, and a `spec.profile` of its author's choice."""
    from surreal_kube.experiment.resolve import resolve_experiment
    from surreal_kube.launch.kube.render.custom_resource import experiment_object

    exp = resolve_experiment(name, sets=[*SPEC_IMAGES, *TINY_SETS, *sets])
    obj = experiment_object(exp, namespace)
    if profile is not None:
        obj["spec"]["profile"] = profile
    return obj


def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE_TEXT)
    return path


def sk(cluster: Any, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, against the test cluster's kubeconfig."""
    env = {**os.environ, **cluster.env(), "COLUMNS": "200"}
    env.pop("SURREAL_KUBE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "surreal_kube.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def kubectl(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **cluster.env()},
        timeout=60,
    )


def connect(cluster: Any, namespace: str) -> Kube:
    return Kube(kubeconfig=cluster.kubeconfig, namespace=namespace)


def ensure_crd(kube: Kube) -> None:
    """Install (or update) the Experiment CRD from operators/crd.yaml and wait until served."""
    import yaml

    crd = yaml.safe_load((ROOT / "operators" / "crd.yaml").read_text())
    kube.field_manager = "surreal-kube-tests"
    try:
        kube.apply(crd)
    finally:
        kube.field_manager = "surreal-kube"

    def established() -> bool:
        got = kube.get(CRD, crd["metadata"]["name"])
        conds = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}
        return conds.get("Established") == "True" and kube.has_experiment_crd()

    wait_for("the Experiment CRD to be served", established, timeout=30)


def objects_of(kube: Kube, name: str, kinds: list[Any] | None = None) -> list[dict[str, Any]]:
    """Every object labelled with the experiment, of the given kinds."""
    out = []
    for res in kinds or KINDS:
        for obj in kube.list(res, labels=naming.experiment_selector(name)):
            if not obj["metadata"].get("deletionTimestamp"):
                out.append(obj)
    return out


def names_of(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)


def normalized(obj: dict[str, Any]) -> dict[str, Any]:
    """What we rendered, without what the server adds (ids, times, status, defaults' owners)."""
    meta = obj["metadata"]
    keep = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(("deployment.kubernetes.io/", "kubectl.kubernetes.io/last-applied"))
    }
    if annotations:
        keep["annotations"] = annotations
    owners = meta.get("ownerReferences") or []
    keep["ownerKinds"] = sorted(o["kind"] for o in owners)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    if obj["kind"] == "Service":  # addresses the server allocates
        body["spec"] = {
            k: v for k, v in body["spec"].items() if k not in ("clusterIP", "clusterIPs")
        }
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": keep, **body}


def pod_uid(kube: Kube, group: str, name: str) -> str:
    pods = [
        p
        for p in kube.list(resource("v1", "Pod"), labels=naming.selector_labels(name, group))
        if p["status"].get("phase") == "Running"
    ]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]["metadata"]["uid"]


def running_pods(kube: Kube, name: str, group: str) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in kube.list(resource("v1", "Pod"), labels=naming.selector_labels(name, group))
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"


def fail_pod(kube: Kube, pod: str) -> None:
    """Make kwok fail a running pod (its chaos stage, tests/cluster/README.md)."""
    kube.patch(resource("v1", "Pod"), pod, {"metadata": {"labels": {FAIL_LABEL: "true"}}})


class Operator:
    """The operator as a process (`python -m surreal_kube.operator`), as the chart runs it."""

    def __init__(
        self, cluster: Any, namespace: str, log: Path, *extra: str, kubeconfig: Path | None = None
    ) -> None:
        self.args = [
            sys.executable,
            "-m",
            "surreal_kube.operator",
            "--namespace",
            namespace,
            "--kubeconfig",
            str(kubeconfig or cluster.kubeconfig),
            "--resync",
            "2",
            *extra,
        ]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        out = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            self.args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
        )
        out.close()
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@contextlib.contextmanager
def running_operator(
    cluster: Any, namespace: str, tmp_path: Path, *extra: str, kubeconfig: Path | None = None
) -> Iterator[Operator]:
    op = Operator(
        cluster, namespace, tmp_path / "operator.log", *extra, kubeconfig=kubeconfig
    ).start()
    try:
        yield op
    except BaseException:
        print(f"--- operator log ({op.log})\n{op.tail()}")
        raise
    finally:
        op.stop()
