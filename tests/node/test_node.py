"""The real node (tests/cluster/node.py): containers really run, beside the kwok pools.

Each check goes through the real path: the scheduler binds to real-0, the kubelet starts
containers with containerd and runc, CNI wires them to the node's bridge, kube-proxy programs
Service IPs, CoreDNS answers, and logs/exec/port-forward go client -> API server -> kubelet ->
containerd.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.experiment.topology import ENDPOINTS
from tests.cluster import controlplane, images, node
from tests.node.support import (
    POD,
    SERVICE,
    experiment_labels,
    experiment_record,
    finished_log,
    real_pod,
    wait_finished,
    wait_for,
    wait_running,
)
from tests.operator.support import ROOT, sk
from tests.operator.support import connect as kube_for
from tests.processes import running, stop

pytestmark = [pytest.mark.cluster, pytest.mark.node]


def test_node_is_ready_with_the_machines_capacity(real_node: Any, kube_cluster: Any) -> None:
    got = kube_cluster.control_plane.request("GET", f"/api/v1/nodes/{node.NODE_NAME}")
    conditions = {c["type"]: c["status"] for c in got["status"]["conditions"]}
    assert conditions["Ready"] == "True", conditions
    assert got["metadata"]["labels"][controlplane.NODEPOOL_LABEL] == node.NODE_POOL
    assert node.REAL_NODE_TAINT in [
        {k: t[k] for k in ("key", "value", "effect")} for t in got["spec"]["taints"]
    ]
    # kwok leaves it alone: it is not annotated as one of kwok's nodes
    assert controlplane.KWOK_NODE_ANNOTATION not in got["metadata"].get("annotations", {})
    capacity = got["status"]["capacity"]
    assert capacity["cpu"] == str(os.cpu_count())
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    assert capacity["memory"] == f"{mem_kib}Ki"
    addresses = {a["type"]: a["address"] for a in got["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.node_ip
    assert got["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.4.2"
    assert got["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"


def test_coredns_and_kube_proxy_run_as_pods_and_program_service_ips(
    real_node: Any, kube_cluster: Any
) -> None:
    cp = kube_cluster.control_plane
    pods = cp.request("GET", "/api/v1/namespaces/kube-system/pods")["items"]
    on_node = {
        p["metadata"]["labels"].get("k8s-app"): p
        for p in pods
        if p["status"].get("phase") == "Running" and p["spec"].get("nodeName") == node.NODE_NAME
    }
    assert {"kube-dns", "kube-proxy"} <= set(on_node), [
        (p["metadata"]["name"], p["status"].get("phase")) for p in pods
    ]
    pod_ip = on_node["kube-dns"]["status"]["podIP"]
    assert pod_ip.startswith(real_node.pod_cidr.rsplit(".", 1)[0] + "."), pod_ip
    assert on_node["kube-proxy"]["status"]["podIP"] == real_node.node_ip  # host network

    # kube-proxy: healthy, and its iptables rules for the DNS Service live in the node's
    # network namespace only
    with urllib.request.urlopen(f"http://{real_node.node_ip}:10256/healthz", timeout=5) as r:
        assert r.status == 200
    in_node = subprocess.run(
        ["ip", "netns", "exec", real_node.netns, "iptables-save", "-t", "nat"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"-d {node.DNS_SERVICE_IP}/32" in in_node and "KUBE-SERVICES" in in_node
    on_host = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert "KUBE-SERVICES" not in on_host and node.DNS_SERVICE_IP not in on_host


def test_pod_runs_and_cli_logs_and_exec_reach_it(
    real_node: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    ns, name = kube_namespace, "exp-real"
    kube = kube_for(kube_cluster, ns)
    experiment_record(kube, name)
    pod = real_pod(
        f"{name}-learner-x",
        ["sh", "-c", 'echo "hello from $(hostname)"; echo "to stderr" >&2; exec sleep 3600'],
        container="learner",
        labels=experiment_labels(name, "learner"),
    )
    kube.create(pod)
    got = wait_running(kube, pod["metadata"]["name"])
    assert got["spec"]["nodeName"] == node.NODE_NAME

    def logs() -> str:
        res = sk(kube_cluster, "logs", name, "learner", "-n", ns)
        both = res.returncode == 0 and res.stdout.count("\n") >= 2
        return res.stdout if both else ""

    text = wait_for("the learner's log through the CLI", logs)
    # stdout and stderr reach the log through two pipes: their order between them is not kept
    assert sorted(text.splitlines()) == sorted([f"hello from {name}-learner-x", "to stderr"])
    res = sk(
        kube_cluster,
        "exec",
        name,
        "learner",
        "-n",
        ns,
        "--",
        "sh",
        "-c",
        'echo "$((6 * 7)) in $(cat /etc/hostname)"; echo oops >&2; exit 3',
    )
    assert (res.stdout, res.stderr, res.returncode) == (f"42 in {name}-learner-x\n", "oops\n", 3)


def test_a_pod_resolves_another_pods_service_by_dns_and_gets_an_answer(
    real_node: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    ns = kube_namespace
    kube = kube_for(kube_cluster, ns)
    token = uuid.uuid4().hex
    server = real_pod(
        "web",
        [
            "sh",
            "-c",
            f"mkdir -p /www && echo {token} > /www/index.html && exec httpd -f -p 8080 -h /www",
        ],
        labels={"app": "web"},
        ports=[8080],
    )
    kube.create(server)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }
    )
    wait_running(kube, "web")
    fqdn = f"web.{ns}.svc.cluster.local"
    client = real_pod(
        "client",
        [
            "sh",
            "-c",
            # the Service's name resolves (CoreDNS; busybox's own resolver: its static glibc
            # cannot load NSS modules, so wget is given the address) and its ClusterIP answers
            # on the Service's port (kube-proxy). (Debian's busybox wget crashes with -T.)
            f"nslookup -type=a {fqdn} > /tmp/ns && cat /tmp/ns && "
            "addr=$(sed -n 's/^Address: //p' /tmp/ns | tail -n 1) && "
            'for i in $(seq 1 30); do timeout 5 wget -q -O - "http://$addr:80/" && exit 0; '
            "sleep 1; done; exit 1",
        ],
    )
    kube.create(client)
    phase = wait_finished(kube, "client")
    log = finished_log(kube, "client")
    assert phase == "Succeeded", log[:2000]
    service_ip = kube.get(SERVICE, "web", ns)["spec"]["clusterIP"]
    assert f"Address: {service_ip}" in log or f"Address 1: {service_ip}" in log, log
    assert log.count(token) == 1, log


def test_tb_port_forward_through_the_api_server_reaches_http_in_a_pod(
    real_node: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    ns, name = kube_namespace, "exp-tb"
    kube = kube_for(kube_cluster, ns)
    experiment_record(kube, name)
    port = ENDPOINTS["tensorboard"].port
    token = uuid.uuid4().hex
    kube.create(
        real_pod(
            f"{name}-tensorboard-x",
            [
                "sh",
                "-c",
                f"mkdir -p /www/data && echo {token} > /www/data/runs && "
                f"exec httpd -f -p {port} -h /www",
            ],
            container="tensorboard",
            labels=experiment_labels(name, "tensorboard"),
            ports=[port],
        )
    )
    wait_running(kube, f"{name}-tensorboard-x")
    env = {**os.environ, **kube_cluster.env()}
    with running(
        [sys.executable, "-m", "surreal_kube.cli.main", "tb", name, "-n", ns],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    ) as tb:
        url = tb.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url or tb.stderr.read()

        def fetch() -> str | None:
            try:
                with urllib.request.urlopen(url + "data/runs", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return None

        assert wait_for("the pod's HTTP server through port-forward", fetch) == f"{token}\n"
        assert fetch() == f"{token}\n"  # a second connection, a second stream
        _, err = stop(tb, signal.SIGTERM)
    assert tb.returncode == 0, err


def test_deleting_a_pod_kills_its_containers(
    real_node: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    kube = kube_for(kube_cluster, kube_namespace)
    marker = str(100000 + int(uuid.uuid4().hex[:5], 16))  # a sleep no one else runs
    kube.create(real_pod("sleeper", ["sleep", marker]))
    got = wait_running(kube, "sleeper")
    container_id = got["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    sandbox_tasks = _tasks(real_node)
    assert container_id in sandbox_tasks
    pids = wait_for("the container's process", lambda: _pids_running(["sleep", marker]))
    kube.delete(POD, "sleeper", kube_namespace)
    wait_for("the pod to go away", lambda: kube.get_or_none(POD, "sleeper", kube_namespace) is None)
    wait_for("containerd to drop the task", lambda: container_id not in _tasks(real_node))
    assert not [p for p in pids if controlplane.pid_alive(p)]


def _tasks(real_node: Any) -> str:
    return subprocess.run(
        real_node.ctr_command("tasks", "list"), capture_output=True, text=True, check=True
    ).stdout


def _pids_running(argv: list[str]) -> list[int]:
    want = [a.encode() for a in argv]
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if cmd[-len(want) :] == want and Path(cmd[0].decode(errors="replace")).name in (
            "sleep",
            "busybox",
        ):
            found.append(int(proc.name))
    return found


def test_images_import_into_the_k8s_namespace(real_node: Any, tmp_path: Path) -> None:
    names = real_node.image_names()
    for ref in (images.PAUSE_IMAGE, images.COREDNS_IMAGE, images.TEST_IMAGE):
        assert ref in names
    archive = images.write_image(
        tmp_path / "hello.tar", "localhost/surreal-kube/hello:test", {"hello.txt": b"hi\n"}
    )
    assert real_node.import_image(archive) == ["localhost/surreal-kube/hello:test"]
    assert "localhost/surreal-kube/hello:test" in real_node.image_names()


def test_pods_reach_the_api_server_through_the_kubernetes_service(
    real_node: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    # busybox speaks no TLS: a plain HTTP request to the API server's TLS port gets Go's
    # answer to exactly that, which proves the path pod -> 10.96.0.1:443 (kube-proxy) -> the
    # EndpointSlice's address -> the API server on loopback
    kube = kube_for(kube_cluster, kube_namespace)
    kube.create(
        real_pod(
            "api-probe",
            [
                "sh",
                "-c",
                'echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; '
                'printf "GET /healthz HTTP/1.0\\r\\n\\r\\n" | '
                'timeout 10 nc "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT"',
            ],
        )
    )
    phase = wait_finished(kube, "api-probe")
    log = finished_log(kube, "api-probe")
    assert log.startswith(f"{controlplane.SERVICE_IP}:443\n"), log
    assert "Client sent an HTTP request to an HTTPS server" in log, (phase, log)
