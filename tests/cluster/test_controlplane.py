"""The test control plane itself: real scheduler, controllers, kwok nodes, Helm.

Every test here talks to the running API server through the official Python client (or the
kubectl/helm binaries built with it) and asserts on what the real controllers did.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.cluster import controlplane
from tests.cluster.fixtures import KubeCluster

pytestmark = pytest.mark.cluster

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 30.0, interval: float = 0.2) -> T:
    """Poll probe() until it returns something truthy; fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def core(kube_cluster: KubeCluster) -> Any:
    from kubernetes import client

    return client.CoreV1Api(kube_cluster.api_client())


def pod_manifest(
    name: str, *, requests: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    if requests:
        container["resources"] = {"requests": requests, "limits": requests}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [container], **spec},
    }


def node_pool(api: Any, node_name: str) -> str:
    return api.read_node(node_name).metadata.labels[controlplane.NODEPOOL_LABEL]


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_nodes_show_pools_with_capacity_labels_and_taints(kube_cluster: KubeCluster) -> None:
    api = core(kube_cluster)
    nodes = {n.metadata.name: n for n in api.list_node().items}
    assert sorted(nodes) == sorted(f"cpu-pool-{i}" for i in range(4)) + sorted(
        f"gpu-pool-{i}" for i in range(2)
    )
    for name, node in nodes.items():
        labels = node.metadata.labels
        ready = [c.status for c in node.status.conditions if c.type == "Ready"]
        assert ready == ["True"], name
        if name.startswith("cpu-pool"):
            assert labels[controlplane.NODEPOOL_LABEL] == "cpu-pool"
            assert controlplane.ACCELERATOR_LABEL not in labels
            assert node.status.capacity["cpu"] == "8"
            assert node.status.capacity["memory"] == "32Gi"
            assert "nvidia.com/gpu" not in node.status.capacity
            assert not node.spec.taints
        else:
            assert labels[controlplane.NODEPOOL_LABEL] == "gpu-pool"
            assert labels[controlplane.ACCELERATOR_LABEL] == "nvidia-tesla-t4"
            assert node.status.capacity["cpu"] == "16"
            assert node.status.capacity["memory"] == "64Gi"
            assert node.status.allocatable["nvidia.com/gpu"] == "4"
            taints = [(t.key, t.value, t.effect) for t in node.spec.taints]
            assert taints == [("nvidia.com/gpu", "present", "NoSchedule")]

    # kubectl (built with the control plane) sees the same through the same kubeconfig.
    out = subprocess.run(
        [
            str(kube_cluster.kubectl),
            "get",
            "nodes",
            "-L",
            controlplane.NODEPOOL_LABEL,
            "--no-headers",
        ],
        env=kube_cluster.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split() for line in out.splitlines()]
    assert {(r[0], r[1], r[-1]) for r in rows} == {(n, "Ready", n.rsplit("-", 1)[0]) for n in nodes}


def test_deployment_replicas_run_on_cpu_pool(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(kube_cluster.api_client())
    api = core(kube_cluster)
    name = f"web-{uuid.uuid4().hex[:6]}"
    template = pod_manifest(
        name,
        requests={"cpu": "1", "memory": "1Gi"},
        nodeSelector={controlplane.NODEPOOL_LABEL: "cpu-pool"},
    )
    apps.create_namespaced_deployment(
        kube_namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        },
    )

    def running() -> list[Any]:
        pods = api.list_namespaced_pod(kube_namespace, label_selector=f"app={name}").items
        return pods if len(pods) == 3 and all(p.status.phase == "Running" for p in pods) else []

    pods = wait_for("3 Running pods", running)
    for pod in pods:
        assert node_pool(api, pod.spec.node_name) == "cpu-pool"
        assert pod.status.pod_ip and pod.status.pod_ip.startswith("10.244.")
    wait_for(
        "the Deployment to report 3 available replicas",
        lambda: (
            apps.read_namespaced_deployment(name, kube_namespace).status.available_replicas == 3
        ),
    )


def test_gpu_pod_lands_on_gpu_pool(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    api = core(kube_cluster)
    body = pod_manifest("gpu-ok", requests={"nvidia.com/gpu": "2"}, tolerations=[GPU_TOLERATION])
    api.create_namespaced_pod(kube_namespace, body)
    pod = wait_for(
        "the GPU pod to run",
        lambda: (
            (p := api.read_namespaced_pod("gpu-ok", kube_namespace)).status.phase == "Running" and p
        ),
    )
    assert node_pool(api, pod.spec.node_name) == "gpu-pool"


def test_gpu_pod_without_toleration_is_kept_off_gpu_nodes(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    api = core(kube_cluster)
    api.create_namespaced_pod(
        kube_namespace, pod_manifest("no-toleration", requests={"nvidia.com/gpu": "1"})
    )
    event = wait_for(
        "a FailedScheduling event", lambda: failed_scheduling(api, kube_namespace, "no-toleration")
    )
    assert "untolerated taint" in event.message and "nvidia.com/gpu" in event.message


def failed_scheduling(api: Any, namespace: str, pod: str) -> Any:
    events = api.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    return next((e for e in events if e.reason == "FailedScheduling"), None)


def pod_scheduled_condition(api: Any, namespace: str, pod: str) -> Any:
    conditions = api.read_namespaced_pod(pod, namespace).status.conditions or []
    return next((c for c in conditions if c.type == "PodScheduled"), None)


def test_oversize_gpu_pod_stays_pending_with_failed_scheduling(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    api = core(kube_cluster)
    body = pod_manifest(
        "gpu-too-big", requests={"nvidia.com/gpu": "8"}, tolerations=[GPU_TOLERATION]
    )
    api.create_namespaced_pod(kube_namespace, body)
    event = wait_for(
        "a FailedScheduling event", lambda: failed_scheduling(api, kube_namespace, "gpu-too-big")
    )
    assert "Insufficient nvidia.com/gpu" in event.message
    # The scheduler records the event and writes the pod's condition as two separate API calls,
    # in no promised order: the condition is waited for on its own, not assumed with the event.
    scheduled = wait_for(
        "the pod's PodScheduled condition",
        lambda: pod_scheduled_condition(api, kube_namespace, "gpu-too-big"),
    )
    assert scheduled.status == "False" and scheduled.reason == "Unschedulable"
    pod = api.read_namespaced_pod("gpu-too-big", kube_namespace)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name


def test_deleting_owner_garbage_collects_dependents(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    api = core(kube_cluster)
    owner = api.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "owner"}, "data": {"a": "1"}}
    )
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    api.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "child", "ownerReferences": [ref]}}
    )
    pod = pod_manifest("child-pod")
    pod["metadata"]["ownerReferences"] = [ref]
    api.create_namespaced_pod(kube_namespace, pod)
    wait_for(
        "the dependent pod to run",
        lambda: api.read_namespaced_pod("child-pod", kube_namespace).status.phase == "Running",
    )

    api.delete_namespaced_config_map("owner", kube_namespace)

    def gone() -> bool:
        names = {c.metadata.name for c in api.list_namespaced_config_map(kube_namespace).items}
        pods = api.list_namespaced_pod(kube_namespace).items
        return "child" not in names and not pods

    wait_for("the garbage collector to delete the dependents", gone, timeout=60)


def test_service_gets_endpointslices(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    from kubernetes import client

    api = core(kube_cluster)
    discovery = client.DiscoveryV1Api(kube_cluster.api_client())
    for i in range(2):
        body = pod_manifest(f"backend-{i}")
        body["metadata"]["labels"] = {"app": "backend"}
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "name": "http"}]
        api.create_namespaced_pod(kube_namespace, body)
    svc = api.create_namespaced_service(
        kube_namespace,
        {
            "metadata": {"name": "backend"},
            "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
    )
    assert svc.spec.cluster_ip.startswith("10.96.")

    def ready_addresses() -> set[str]:
        slices = discovery.list_namespaced_endpoint_slice(
            kube_namespace, label_selector="kubernetes.io/service-name=backend"
        ).items
        addrs = {
            a for s in slices for e in s.endpoints or [] if e.conditions.ready for a in e.addresses
        }
        return addrs if len(addrs) == 2 else set()

    addresses = wait_for("two ready endpoints", ready_addresses)
    pod_ips = {
        p.status.pod_ip
        for p in api.list_namespaced_pod(kube_namespace, label_selector="app=backend").items
    }
    assert addresses == pod_ips
    slices = discovery.list_namespaced_endpoint_slice(
        kube_namespace, label_selector="kubernetes.io/service-name=backend"
    )
    assert {p.port for s in slices.items for p in s.ports or []} == {8080}


def test_helm_version_template_and_install(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    version = subprocess.run(
        [str(kube_cluster.helm), "version", "--short"], capture_output=True, text=True, check=True
    ).stdout
    assert version.startswith("v3."), version
    chart = tmp_path / "hello"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: hello\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("greeting: hi\n")
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-hello\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )
    out = subprocess.run(
        [str(kube_cluster.helm), "template", "demo", str(chart), "--set", "greeting=hello"],
        capture_output=True,
        text=True,
        check=True,
        env=kube_cluster.env(),
    ).stdout
    assert "name: demo-hello" in out
    assert 'greeting: "hello"' in out

    # And it reaches the API server: install, then the object exists.
    subprocess.run(
        [str(kube_cluster.helm), "install", "demo", str(chart), "-n", kube_namespace, "--wait"],
        capture_output=True,
        text=True,
        check=True,
        env=kube_cluster.env(),
    )
    cm = core(kube_cluster).read_namespaced_config_map("demo-hello", kube_namespace)
    assert cm.data == {"greeting": "hi"}


def test_kwok_chaos_stage_fails_labelled_pod(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    api = core(kube_cluster)
    body = pod_manifest("doomed", restartPolicy="Never")
    body["metadata"]["labels"]["pod-container-running-failed.stage.kwok.x-k8s.io"] = "true"
    body["metadata"]["annotations"] = {
        "pod-container-running-failed.stage.kwok.x-k8s.io/exit-code": "3",
        "pod-container-running-failed.stage.kwok.x-k8s.io/delay": "0s",
        "pod-container-running-failed.stage.kwok.x-k8s.io/jitter-delay": "0s",
    }
    api.create_namespaced_pod(kube_namespace, body)
    pod = wait_for(
        "the labelled pod to fail",
        lambda: (
            (p := api.read_namespaced_pod("doomed", kube_namespace)).status.phase == "Failed" and p
        ),
    )
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 3


def test_job_pods_complete(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_cluster.api_client())
    template = pod_manifest("once", restartPolicy="Never")
    batch.create_namespaced_job(
        kube_namespace,
        {
            "metadata": {"name": "once"},
            "spec": {"template": {"spec": template["spec"]}, "backoffLimit": 0},
        },
    )
    wait_for(
        "the Job to succeed",
        lambda: batch.read_namespaced_job("once", kube_namespace).status.succeeded == 1,
    )


def test_pod_logs_through_apiserver_come_from_a_local_file(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    api = core(kube_cluster)
    api.create_namespaced_pod(kube_namespace, pod_manifest("talker"))
    wait_for(
        "the pod to run",
        lambda: api.read_namespaced_pod("talker", kube_namespace).status.phase == "Running",
    )
    log_file = tmp_path / "talker.log"
    controlplane.write_cri_log(log_file, ["hello from a file", "second line"])
    custom = client.CustomObjectsApi(kube_cluster.api_client())
    custom.create_namespaced_custom_object(
        "kwok.x-k8s.io",
        "v1alpha1",
        kube_namespace,
        "logs",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": "talker"},
            "spec": {"logs": [{"containers": ["main"], "logsFile": str(log_file)}]},
        },
    )

    def logs() -> str:
        try:
            return api.read_namespaced_pod_log("talker", kube_namespace, container="main")
        except client.ApiException:
            return ""  # kwok has not seen the Logs object yet

    assert wait_for("the pod's logs", logs) == "hello from a file\nsecond line\n"
    # kubectl logs goes the same way: API server -> kwok's kubelet API -> the file.
    out = subprocess.run(
        [str(kube_cluster.kubectl), "logs", "-n", kube_namespace, "talker", "--tail=1"],
        env=kube_cluster.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == "second line\n"


def test_port_forward_through_apiserver_reaches_a_local_port(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    from kubernetes import client

    api = core(kube_cluster)
    body = pod_manifest("server")
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 6006}]
    api.create_namespaced_pod(kube_namespace, body)
    wait_for(
        "the pod to run",
        lambda: api.read_namespaced_pod("server", kube_namespace).status.phase == "Running",
    )

    # The "container" is a local TCP server that answers every line with "pong: <line>".
    target = socket.create_server(("127.0.0.1", 0))
    target_port = target.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = target.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(1024)
                conn.sendall(b"pong: " + data)

    threading.Thread(target=serve, daemon=True).start()
    custom = client.CustomObjectsApi(kube_cluster.api_client())
    custom.create_namespaced_custom_object(
        "kwok.x-k8s.io",
        "v1alpha1",
        kube_namespace,
        "portforwards",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "PortForward",
            "metadata": {"name": "server"},
            "spec": {
                "forwards": [
                    {"ports": [6006], "target": {"address": "127.0.0.1", "port": target_port}}
                ]
            },
        },
    )
    local_port = controlplane.free_port()
    forward = subprocess.Popen(
        [
            str(kube_cluster.kubectl),
            "port-forward",
            "-n",
            kube_namespace,
            "pod/server",
            f"{local_port}:6006",
        ],
        env=kube_cluster.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def ping() -> bytes:
            try:
                with socket.create_connection(("127.0.0.1", local_port), timeout=2) as s:
                    s.sendall(b"ping\n")
                    return s.recv(1024)
            except OSError:
                return b""

        assert wait_for("an answer through port-forward", ping) == b"pong: ping\n"
    finally:
        forward.terminate()
        forward.wait(timeout=10)

    # The Python client's port-forward (a websocket to the API server) goes the same way.
    from kubernetes.stream import portforward

    try:
        pf = portforward(
            api.connect_get_namespaced_pod_portforward, "server", kube_namespace, ports="6006"
        )
        sock = pf.socket(6006)
        sock.setblocking(True)
        sock.sendall(b"hello\n")
        assert sock.recv(1024) == b"pong: hello\n"
        sock.close()
    finally:
        target.close()


def test_teardown_leaves_no_process_and_no_port(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    # A second, private control plane, so that stopping it leaves the session's one running.
    cp = controlplane.ControlPlane(
        workdir=tmp_path / "cp", pools=[{"name": "tiny", "count": 1}], bin_dir=kube_cluster.bin_dir
    )
    cp.start()
    try:
        pids = [p.pid for p in cp.procs]
        ports = dict(cp.ports)
        assert len(pids) == len(controlplane.COMPONENTS)
        assert all(controlplane.pid_alive(pid) for pid in pids)
        for name in ("etcd", "apiserver", "controller-manager", "scheduler", "kwok"):
            assert controlplane.port_listening(ports[name]), name
        assert cp.startup_seconds is not None  # it started; how long it took is no test's bound
    finally:
        cp.stop()
    assert [pid for pid in pids if controlplane.pid_alive(pid)] == []
    assert {n: p for n, p in ports.items() if controlplane.port_listening(p)} == {}
    assert listening_ports() & set(ports.values()) == set()


def listening_ports() -> set[int]:
    """Every TCP port in LISTEN state on this machine (from /proc/net/tcp{,6})."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_exec_through_apiserver_runs_a_local_command(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    api = core(kube_cluster)
    api.create_namespaced_pod(kube_namespace, pod_manifest("shell"))
    wait_for(
        "the pod to run",
        lambda: api.read_namespaced_pod("shell", kube_namespace).status.phase == "Running",
    )
    client.CustomObjectsApi(kube_cluster.api_client()).create_namespaced_custom_object(
        "kwok.x-k8s.io",
        "v1alpha1",
        kube_namespace,
        "execs",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Exec",
            "metadata": {"name": "shell"},
            "spec": {
                "execs": [
                    {
                        "local": {
                            "workDir": str(tmp_path),
                            "envs": [{"name": "GREETING", "value": "hi"}],
                        }
                    }
                ]
            },
        },
    )

    command = ["sh", "-c", 'echo "$GREETING from $(pwd)"']

    def run() -> str:
        done = subprocess.run(
            [str(kube_cluster.kubectl), "exec", "-n", kube_namespace, "shell", "--", *command],
            env=kube_cluster.env(),
            capture_output=True,
            text=True,
        )
        return done.stdout if done.returncode == 0 else ""

    assert wait_for("kubectl exec to answer", run) == f"hi from {tmp_path}\n"


def test_labelling_a_running_pod_fails_it_and_its_replicaset_replaces_it(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(kube_cluster.api_client())
    api = core(kube_cluster)
    template = pod_manifest("worker")
    apps.create_namespaced_deployment(
        kube_namespace,
        {
            "metadata": {"name": "worker"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "worker"}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        },
    )

    def pods(phase: str) -> list[Any]:
        items = api.list_namespaced_pod(kube_namespace, label_selector="app=worker").items
        return [p for p in items if p.status.phase == phase]

    victim = wait_for("the worker to run", lambda: pods("Running"))[0].metadata.name
    api.patch_namespaced_pod(
        victim,
        kube_namespace,
        {
            "metadata": {
                "labels": {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
                "annotations": {"pod-container-running-failed.stage.kwok.x-k8s.io/delay": "0s"},
            }
        },
    )
    failed = wait_for("the labelled pod to fail", lambda: pods("Failed"))
    assert [p.metadata.name for p in failed] == [victim]
    replacement = wait_for(
        "a replacement pod to run",
        lambda: [p for p in pods("Running") if p.metadata.name != victim],
    )
    assert len(replacement) == 1
