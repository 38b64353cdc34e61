"""The CLI against the test control plane, applying the objects itself (`--direct`).

Real API server, scheduler and controllers; kwok plays the kubelets, so pods reach Running (and
fail, serve logs, exec and port-forward) without running anything. Each test has its own
namespace. The Experiment CRD may be installed by other tests, hence `--direct` everywhere here;
the operator path is tests/operator/test_operator_cluster.py.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import resource
from tests.operator.support import (
    IMAGE_ARGS,
    KINDS,
    ROOT,
    TINY,
    fail_pod,
    names_of,
    objects_of,
    pod_uid,
    profile_file,
    running_pods,
    sk,
    wait_for,
)
from tests.operator.support import connect as kube_for
from tests.processes import running, stop

pytestmark = pytest.mark.cluster

POD = resource("v1", "Pod")


def create_args(name: str, namespace: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "create",
        name,
        "-n",
        namespace,
        "--direct",
        "--profile",
        str(profile_file(tmp_path)),
        *IMAGE_ARGS,
        *TINY,
        *extra,
    ]


def status_json(cluster: Any, name: str, namespace: str) -> dict[str, Any]:
    res = sk(cluster, "status", name, "-n", namespace, "-o", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_create_list_status_scale_delete(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-life"
    res = sk(
        kube_cluster, *create_args(name, ns, tmp_path, "--num-agents", "2", "--num-evals", "1")
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"{name}\n"
    # the progress view (stderr): what is applied, readiness as it changes, then the end
    assert f"creating {name} in namespace {ns} (context surreal-kube-test) directly" in res.stderr
    assert "applied ConfigMap/exp-life-config" in res.stderr
    assert "Running 9/9 pods ready" in res.stderr
    assert "COMPONENT" in res.stderr and "learner" in res.stderr
    assert f"{name} is running: 9/9 pods, 2/2 agents" in res.stderr

    kube = kube_for(kube_cluster, ns)
    assert len(running_pods(kube, name, "agents")) == 2

    listing = sk(kube_cluster, "list", "-n", ns, "-o", "json")
    assert listing.returncode == 0, listing.stderr
    (row,) = json.loads(listing.stdout)
    assert {k: row[k] for k in ("name", "namespace", "phase", "agents", "gpus", "via")} == {
        "name": name,
        "namespace": ns,
        "phase": "Running",
        "agents": "2/2",
        "gpus": 0,
        "via": "direct",
    }
    table = sk(kube_cluster, "list", "-n", ns)
    assert table.stdout.split("\n")[0].split() == [
        "NAME",
        "PHASE",
        "AGE",
        "AGENTS",
        "GPUS",
        "ITERATION",
        "STEPS",
        "RETURN",
        "VIA",
    ]

    st = status_json(kube_cluster, name, ns)
    assert st["phase"] == "Running" and st["ready"] == "9/9" and st["via"] == "direct", st
    assert st["components"]["agents"] == {"desired": 2, "ready": 2, "restarts": 0, "pending": {}}
    assert {p["phase"] for p in st["processes"].values()} == {"Running"}
    assert all(p["node"].startswith("cpu-pool-") for p in st["processes"].values())
    human = sk(kube_cluster, "status", name, "-n", ns)
    assert "phase Running" in human.stdout and "exp-life-agents-1" in human.stdout

    # scaling agents changes the agent pods and nothing of the learner
    learner = pod_uid(kube, "learner", name)
    learner_gen = kube.get(resource("apps/v1", "Deployment"), f"{name}-learner")["metadata"][
        "generation"
    ]
    res = sk(
        kube_cluster,
        "scale",
        name,
        "--agents",
        "4",
        "--wait",
        "-n",
        ns,
        "--profile",
        str(profile_file(tmp_path)),
    )
    assert res.returncode == 0, res.stderr
    assert f"{name}: agents 2 -> 4" in res.stderr
    assert running_pods(kube, name, "agents") == [f"{name}-agents-{i}" for i in range(4)]
    assert pod_uid(kube, "learner", name) == learner
    assert (
        kube.get(resource("apps/v1", "Deployment"), f"{name}-learner")["metadata"]["generation"]
        == learner_gen
    )
    assert status_json(kube_cluster, name, ns)["agents"] == "4/4"
    res = sk(
        kube_cluster,
        "scale",
        name,
        "--agents",
        "1",
        "-n",
        ns,
        "--profile",
        str(profile_file(tmp_path)),
    )
    assert res.returncode == 0, res.stderr
    wait_for("agents 1-3 to go", lambda: running_pods(kube, name, "agents") == [f"{name}-agents-0"])
    assert pod_uid(kube, "learner", name) == learner

    res = sk(kube_cluster, "delete", name, "--wait", "-n", ns)
    assert res.returncode == 0, res.stderr
    assert f"deleted {name} from namespace {ns} (all gone)" in res.stderr
    assert objects_of(kube, name) == []
    gone = sk(kube_cluster, "status", name, "-n", ns)
    assert gone.returncode == 1
    assert f"no experiment named '{name}' in namespace '{ns}'" in gone.stderr


def test_a_create_that_fails_half_way_leaves_nothing(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-quota"
    kube = kube_for(kube_cluster, ns)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "two-deployments"},
        "spec": {"hard": {"count/deployments.apps": "2"}},
    }
    kube.create(quota)
    wait_for(
        "the quota to be counted",
        lambda: (
            kube.get(resource("v1", "ResourceQuota"), "two-deployments")
            .get("status", {})
            .get("hard")
        ),
    )
    res = sk(kube_cluster, *create_args(name, ns, tmp_path))
    assert res.returncode == 1, res.stderr
    # workloads are applied several at once: whichever Deployment comes third is refused
    assert re.search(r"apply Deployment/exp-quota-[a-z]+: ", res.stderr), res.stderr
    assert "exceeded quota: two-deployments" in res.stderr
    assert "nothing was left behind" in res.stderr
    assert "Traceback" not in res.stderr
    wait_for("every object to be gone", lambda: objects_of(kube, name) == [], timeout=60)


def test_gpus_refused_by_preflight_then_explained_by_status(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-gpu"
    big = ["--set", "resources.learner.gpu=8"]
    res = sk(kube_cluster, *create_args(name, ns, tmp_path, *big))
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "error: cannot place learner: each pod asks for cpu 10m, memory 16Mi, nvidia.com/gpu 8, but "
        "no node pool has a node that large; the largest, gpu-pool, offers cpu 16, memory 64Gi, "
        "nvidia.com/gpu 4 per node"
    )
    kube = kube_for(kube_cluster, ns)
    assert objects_of(kube, name) == []

    res = sk(
        kube_cluster, *create_args(name, ns, tmp_path, *big, "--skip-preflight", "--timeout", "15")
    )
    assert res.returncode == 1
    assert "exp-gpu is not running after 15s" in res.stderr
    assert "needs 8 nvidia.com/gpu" in res.stderr
    st = status_json(kube_cluster, name, ns)
    assert st["phase"] == "Pending" and st["gpus"] == 8
    (reason,) = st["components"]["learner"]["pending"].values()
    assert reason == "needs 8 nvidia.com/gpu, the largest free slot on gpu-pool has 4"
    learner = next(p for p in st["processes"].values() if p["pod"].startswith(f"{name}-learner"))
    assert learner["phase"] == "Pending" and learner["node"] is None
    assert st["components"]["agents"]["ready"] == 2  # the rest runs
    human = sk(kube_cluster, "status", name, "-n", ns)
    assert "needs 8 nvidia.com/gpu, the largest free slot on gpu-pool has 4" in human.stdout

    # the free slot counts what other pods hold: 3 GPUs taken on each GPU node leaves 1
    sk(kube_cluster, "delete", name, "--wait", "-n", ns)
    for i in range(2):
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"hog-{i}"},
                "spec": {
                    "nodeName": f"gpu-pool-{i}",
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "containers": [
                        {
                            "name": "c",
                            "image": "i",
                            "resources": {"limits": {"nvidia.com/gpu": "3"}},
                        }
                    ],
                },
            }
        )
    res = sk(
        kube_cluster,
        *create_args(
            "exp-gpu2",
            ns,
            tmp_path,
            "--set",
            "resources.learner.gpu=2",
            "--skip-preflight",
            "--no-wait",
        ),
    )
    assert res.returncode == 0, res.stderr

    def reason2() -> str | None:
        pending = status_json(kube_cluster, "exp-gpu2", ns)["components"]["learner"]["pending"]
        return next(iter(pending.values()), None) if pending else None

    assert wait_for("the scheduler's verdict", lambda: (r := reason2()) and "needs" in r and r) == (
        "needs 2 nvidia.com/gpu, the largest free slot on gpu-pool has 1"
    )


def test_failed_and_deleted_pods(kube_cluster: Any, kube_namespace: str, tmp_path: Path) -> None:
    ns, name = kube_namespace, "exp-fault"
    assert sk(kube_cluster, *create_args(name, ns, tmp_path)).returncode == 0
    kube = kube_for(kube_cluster, ns)
    # a deleted agent pod comes back (its StatefulSet), and the experiment is Running again
    old = kube.get(POD, f"{name}-agents-1")["metadata"]["uid"]
    kube.delete(POD, f"{name}-agents-1")
    wait_for(
        "agents-1 to come back",
        lambda: (
            (p := kube.get_or_none(POD, f"{name}-agents-1"))
            and p["metadata"]["uid"] != old
            and p["status"].get("phase") == "Running"
        ),
    )
    # a learner pod made to fail by kwok: replaced, and reported with its restart
    learner = running_pods(kube, name, "learner")[0]
    fail_pod(kube, learner)

    def replaced() -> dict[str, Any] | None:
        st = status_json(kube_cluster, name, ns)
        return st if st["phase"] == "Running" and st["learnerRestarts"] == 1 else None

    st = wait_for("the learner to be replaced", replaced, timeout=60)
    assert st["components"]["learner"]["restarts"] == 1
    (proc,) = [p for p in st["processes"].values() if p["pod"].startswith(f"{name}-learner")]
    assert proc["pod"] != learner and proc["restarts"] == 1 and proc["phase"] == "Running"


def write_cri(path: Path, lines: list[str]) -> None:
    from tests.cluster.controlplane import write_cri_log

    write_cri_log(path, lines)


def kwok_object(kube: Any, plural: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    kube.raw(
        "POST",
        f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{kube.namespace}/{plural}",
        body={
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def test_logs_exec_and_tensorboard_through_the_api_server(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-io"
    assert sk(kube_cluster, *create_args(name, ns, tmp_path)).returncode == 0
    kube = kube_for(kube_cluster, ns)
    learner = running_pods(kube, name, "learner")[0]

    # logs: kwok serves a file as the container's log (CRI format), through the API server
    write_cri(tmp_path / "learner.log", ["iteration 1", "iteration 2", "iteration 3"])
    write_cri(tmp_path / "learner.prev.log", ["crashed before"])
    write_cri(tmp_path / "agents-1.log", ["agent 1 says hi"])
    kwok_object(
        kube,
        "logs",
        "Logs",
        learner,
        {
            "logs": [
                {
                    "containers": ["learner"],
                    "logsFile": str(tmp_path / "learner.log"),
                    "previousLogsFile": str(tmp_path / "learner.prev.log"),
                }
            ]
        },
    )
    kwok_object(
        kube,
        "logs",
        "Logs",
        f"{name}-agents-1",
        {"logs": [{"containers": ["agents"], "logsFile": str(tmp_path / "agents-1.log")}]},
    )

    def logs(*args: str) -> str:
        res = sk(kube_cluster, "logs", name, *args, "-n", ns)
        return res.stdout if res.returncode == 0 else ""

    assert (
        wait_for("the learner's log", lambda: logs("learner"))
        == "iteration 1\niteration 2\niteration 3\n"
    )
    assert logs("learner", "--tail", "1") == "iteration 3\n"
    assert logs("learner", "--previous") == "crashed before\n"
    assert wait_for("agents/1's log", lambda: logs("agents/1")) == "agent 1 says hi\n"
    bad = sk(kube_cluster, "logs", name, "critic", "-n", ns)
    assert bad.returncode == 2 and "no process 'critic' in exp-io; valid: learner" in bad.stderr

    # exec: kwok runs the command on this machine, in the workDir the Exec object names
    kwok_object(
        kube,
        "execs",
        "Exec",
        learner,
        {
            "execs": [
                {
                    "containers": ["learner"],
                    "local": {
                        "workDir": str(tmp_path),
                        "envs": [{"name": "GREETING", "value": "hi"}],
                    },
                }
            ]
        },
    )

    def run_exec() -> subprocess.CompletedProcess[str] | None:
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
            'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3',
        )
        return res if res.stdout else None

    res = wait_for("exec to answer", run_exec)
    assert res.stdout == f"hi from {tmp_path}\n" and res.stderr == "oops\n" and res.returncode == 3

    # tb: port-forward to the TensorBoard pod; kwok forwards port 6006 to a local HTTP server
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"tensorboard stand-in at {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    board = running_pods(kube, name, "tensorboard")[0]
    kwok_object(
        kube,
        "portforwards",
        "PortForward",
        board,
        {
            "forwards": [
                {
                    "ports": [6006],
                    "target": {"address": "127.0.0.1", "port": server.server_address[1]},
                }
            ]
        },
    )
    env = {**os.environ, **kube_cluster.env()}
    # SIGINT ignored, as in a background job of a non-interactive shell (`nohup make test &`):
    # `tb` must still stop cleanly, on SIGTERM.
    with running(
        [sys.executable, "-m", "surreal_kube.cli.main", "tb", name, "-n", ns],
        ignore_sigint=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    ) as tb:
        try:
            url = tb.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and url.endswith("/"), (
                url if url else tb.stderr.read()
            )

            def fetch() -> str | None:
                try:
                    with urllib.request.urlopen(url + "data/runs", timeout=5) as r:
                        return r.read().decode()
                except OSError:
                    return None

            assert (
                wait_for("TensorBoard through the port-forward", fetch)
                == "tensorboard stand-in at /data/runs"
            )
            assert (
                fetch() == "tensorboard stand-in at /data/runs"
            )  # a second connection, a second stream
        finally:
            server.shutdown()
        _, tb_err = stop(tb, signal.SIGTERM)
    assert tb.returncode == 0, tb_err


def test_dry_runs_store_nothing(kube_cluster: Any, kube_namespace: str, tmp_path: Path) -> None:
    ns, name = kube_namespace, "exp-dry"
    client = sk(kube_cluster, *create_args(name, ns, tmp_path, "--dry-run"))
    assert client.returncode == 0, client.stderr
    import yaml

    docs = [d for d in yaml.safe_load_all(client.stdout) if d]
    assert docs[0]["kind"] == "ConfigMap" and docs[-1]["kind"] == "StatefulSet"
    assert {d["metadata"]["namespace"] for d in docs} == {ns}
    server = sk(kube_cluster, *create_args(name, ns, tmp_path, "--dry-run-server"))
    assert server.returncode == 0, server.stderr
    # the server admits what create applies: the printed objects and the CURVE key's Secret,
    # which is made at apply and never printed (lifecycle/keys.py)
    assert all(d["kind"] != "Secret" for d in docs)
    assert (
        f"{name}: the API server accepted {len(docs) + 1} objects (dry run, nothing stored)"
        in server.stderr
    )
    kube = kube_for(kube_cluster, ns)
    assert objects_of(kube, name) == []


def test_contexts_and_namespaces_as_kubectl_users_expect(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-ctx"
    assert sk(kube_cluster, *create_args(name, ns, tmp_path, "--no-wait")).returncode == 0
    config = json.loads(Path(kube_cluster.kubeconfig).read_text())
    config["contexts"].append(
        {
            "name": "team",
            "context": {"cluster": "surreal-kube-test", "user": "admin", "namespace": ns},
        }
    )
    other = tmp_path / "kubeconfig"
    other.write_text(json.dumps(config))
    res = sk(kube_cluster, "list", "--kubeconfig", str(other), "--context", "team", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert [r["name"] for r in json.loads(res.stdout)] == [name]
    res = sk(kube_cluster, "list", "--kubeconfig", str(other), "--context", "nope")
    assert res.returncode == 1
    assert (
        "kubeconfig has no context named 'nope' (contexts: surreal-kube-test, team)" in res.stderr
    )
    res = sk(kube_cluster, "list", "-A", "-o", "json")
    assert any(r["name"] == name and r["namespace"] == ns for r in json.loads(res.stdout))


def test_no_objects_of_kinds_we_do_not_know(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    """`delete --wait` checks the kinds the renderer makes; nothing else carries the label."""
    ns, name = kube_namespace, "exp-kinds"
    assert sk(kube_cluster, *create_args(name, ns, tmp_path, "--no-wait")).returncode == 0
    kube = kube_for(kube_cluster, ns)
    made = {(o["apiVersion"], o["kind"]) for o in objects_of(kube, name)}
    assert made <= {(r.api_version, r.kind) for r in KINDS}
    assert names_of(objects_of(kube, name, [resource("v1", "ConfigMap")])) == [
        f"ConfigMap/{name}-config",
        f"ConfigMap/{name}-progress",
        f"ConfigMap/{name}-results",
    ]
    root = kube.get(resource("v1", "ConfigMap"), naming.config_name(name))
    for obj in objects_of(kube, name, [r for r in KINDS if r.kind not in ("ConfigMap", "Pod")]):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == root["metadata"]["uid"] and ref["controller"] is True
