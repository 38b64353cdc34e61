"""The real CPU runtime image on the real node: `surreal-kube build --load` puts it into the node's
containerd, and pods of it run there, found by `surreal-kube logs` and `exec`, and talking ZeroMQ to
each other through a Service's DNS name.

The image is built (or found by its content-hash tag) through podman's Docker API as
tests/launch/kube/test_runtime_image_podman.py does; the node is tests/cluster/node.py's
(fixture `real_node`, interface in tests/cluster/README.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.images import load as image_load
from tests.cluster.fixtures import KubeCluster
from tests.launch.kube.engine import (
    BASE_IMAGE,
    Engine,
    engine_or_skip,
)
from tests.launch.kube.test_images_podman import ROOT, project_copy, snapshot_sets

pytestmark = [
    pytest.mark.node,
    pytest.mark.cluster,
    pytest.mark.podman,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

EXP = "exp-img"
SK = [sys.executable, "-m", "surreal_kube.cli.main"]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    yield from engine_or_skip()


@pytest.fixture(scope="module")
def loaded_image(engine: Engine, real_node: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """`surreal-kube build --load` of this checkout's runtime-cpu image into the node (from a
    snapshot of its files: the same tag, whatever is edited meanwhile)."""
    project = project_copy(tmp_path_factory.mktemp("runtime-image") / "project")
    done = subprocess.run(
        [
            *SK,
            "build",
            EXP,
            "--engine",
            engine.url,
            "--build-arg",
            f"PYTHON_IMAGE={BASE_IMAGE}",
            "--context-dir",
            str(project),
            *(arg for s in snapshot_sets("cpu") for arg in ("--set", s)),
            "--load",
            "--containerd-address",
            str(real_node.containerd_address),
            "--ctr",
            str(real_node.ctr),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3000,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    by_key = {key: (ref, status) for key, ref, status in rows}
    # the operator's version tag may name an earlier build of this engine ("kept": it never
    # moves); either way the node holds it after --load
    assert by_key["cpu"][1] == "loaded" and by_key["operator"][1] in ("loaded", "kept"), rows
    names = real_node.image_names()
    for ref, _ in by_key.values():
        assert image_load.normalized(ref) in names
    return by_key["cpu"][0]


def on_real_node(
    name: str,
    image: str,
    command: list[str],
    labels: dict[str, str],
    container: str,
    restart: str = "Never",
) -> dict[str, Any]:
    from tests.cluster.node import NODE_POOL, REAL_NODE_TOLERATION

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": restart,
            "nodeSelector": {"cloud.google.com/gke-nodepool": NODE_POOL},
            "tolerations": [REAL_NODE_TOLERATION],
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": container,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True,
                        "allowPrivilegeEscalation": False,
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }


def wait_phase(core: Any, ns: str, name: str, phases: set[str], timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    phase = ""
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, ns)
        phase = pod.status.phase
        if phase in phases:
            return phase
        if phase == "Failed":
            break
        time.sleep(1)
    log = core.read_namespaced_pod_log(name, ns) if phase in ("Failed", "Running") else ""
    raise AssertionError(f"pod {name} is {phase}, wanted {phases}: {log[-2000:]}")


def sk(cluster: KubeCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a person runs it, against the test cluster (KUBECONFIG: an `exec` command
    after `--` must not get flags appended)."""
    return subprocess.run(
        [*SK, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )


def test_a_pod_of_the_image_runs_the_role_entry_point_logs_and_exec(
    kube_cluster: KubeCluster, kube_namespace: str, loaded_image: str
) -> None:
    from kubernetes import client

    from tests.node.support import experiment_record
    from tests.operator.support import connect

    core = client.CoreV1Api(kube_cluster.api_client())
    experiment_record(connect(kube_cluster, kube_namespace), EXP)  # how the CLI finds EXP
    labels = naming.selector_labels(EXP, "learner")  # what `logs EXP learner` looks for
    pod = on_real_node(
        f"{EXP}-learner-x",
        loaded_image,
        ["sh", "-c", "surreal-kube-role --help; exec sleep 3600"],
        labels,
        "learner",
    )
    core.create_namespaced_pod(kube_namespace, pod)
    wait_phase(core, kube_namespace, pod["metadata"]["name"], {"Running"})

    deadline = time.monotonic() + 60
    while True:
        logs = sk(kube_cluster, "logs", EXP, "learner", "-n", kube_namespace)
        if "usage: surreal-kube-role" in logs.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert logs.returncode == 0, logs.stderr
    assert "usage: surreal-kube-role" in logs.stdout and "replay-shard" in logs.stdout

    done = sk(
        kube_cluster,
        "exec",
        EXP,
        "learner",
        "-n",
        kube_namespace,
        "--",
        "python",
        "-c",
        "import torch, mujoco, os; print(torch.__version__, os.getuid())",
    )
    assert done.returncode == 0, done.stderr
    version, uid = done.stdout.split()
    assert version.startswith("2.15.0") and uid == "10001"


ZMQ_SERVER = """
import zmq
s = zmq.Context().socket(zmq.REP); s.bind("tcp://*:5555")
while True:
    s.send(b"pong:" + s.recv())
"""

ZMQ_CLIENT = """
import socket, sys, zmq
host = sys.argv[1]
print("resolved", host, socket.gethostbyname(host), flush=True)
s = zmq.Context().socket(zmq.REQ)
s.setsockopt(zmq.RCVTIMEO, 60000); s.setsockopt(zmq.LINGER, 0)
s.connect(f"tcp://{host}:5555")
s.send(b"ping")
print(s.recv().decode(), flush=True)
"""


def test_zeromq_round_trip_between_two_pods_through_a_service_name(
    kube_cluster: KubeCluster, kube_namespace: str, loaded_image: str
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(kube_cluster.api_client())
    server_labels = {"app.kubernetes.io/name": "zmq-echo"}
    core.create_namespaced_pod(
        kube_namespace,
        on_real_node(
            "zmq-server", loaded_image, ["python", "-c", ZMQ_SERVER], server_labels, "server"
        ),
    )
    core.create_namespaced_service(
        kube_namespace,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "zmq-echo"},
            "spec": {
                "selector": server_labels,
                "ports": [{"name": "zmq", "port": 5555, "targetPort": 5555}],
            },
        },
    )
    wait_phase(core, kube_namespace, "zmq-server", {"Running"})
    host = f"zmq-echo.{kube_namespace}.svc.cluster.local"
    core.create_namespaced_pod(
        kube_namespace,
        on_real_node("zmq-client", loaded_image, ["python", "-c", ZMQ_CLIENT, host], {}, "client"),
    )
    wait_phase(core, kube_namespace, "zmq-client", {"Succeeded"})
    log = core.read_namespaced_pod_log("zmq-client", kube_namespace)
    assert f"resolved {host} 10.96." in log  # the Service's cluster IP, through CoreDNS
    assert "pong:ping" in log
