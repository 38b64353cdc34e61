"""The real CPU runtime image on the real node: `surreal-kube build --load` put it into the node's
containerd (the e2e cluster's fixture, tests/e2e/conftest.py), and pods of it run there, found by
`surreal-kube logs` and `exec`, and talking ZeroMQ to each other through a Service's DNS name.

These ran on the shared test cluster's node, which loaded the image a second time for them alone
(about 2 minutes of every suite run); the e2e cluster already holds it.
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
from tests.cluster.fixtures import KubeCluster
from tests.e2e.support import MARKS, ROOT, E2ECluster

pytestmark = MARKS

EXP = "exp-img"
SK = [sys.executable, "-m", "surreal_kube.cli.main"]


@pytest.fixture
def kube_cluster(e2e: E2ECluster) -> KubeCluster:
    """The e2e cluster as the cluster tests' helpers take it (its owner stops it)."""
    return KubeCluster(e2e.cp, owned=False)


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace, deleted afterwards: the other e2e tests never see these pods."""
    name = kube_cluster.create_namespace("t-image")
    yield name
    kube_cluster.delete_namespace(name)


@pytest.fixture
def loaded_image(e2e: E2ECluster) -> str:
    assert e2e.image is not None
    return e2e.image


def on_the_node(
    name: str,
    image: str,
    command: list[str],
    labels: dict[str, str],
    container: str,
    restart: str = "Never",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": restart,
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
    pod = on_the_node(
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
        on_the_node(
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
        on_the_node("zmq-client", loaded_image, ["python", "-c", ZMQ_CLIENT, host], {}, "client"),
    )
    wait_phase(core, kube_namespace, "zmq-client", {"Succeeded"})
    # containerd may mark the container exited before its output is all in the log file
    deadline = time.monotonic() + 30
    log = core.read_namespaced_pod_log("zmq-client", kube_namespace)
    while "pong:ping" not in log and time.monotonic() < deadline:
        time.sleep(0.5)
        log = core.read_namespaced_pod_log("zmq-client", kube_namespace)
    assert f"resolved {host} 10.96." in log  # the Service's cluster IP, through CoreDNS
    assert "pong:ping" in log
