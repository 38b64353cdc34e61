"""The user's path on a real node, end to end (issue 12): create, watch, TensorBoard, a pod killed
and a learner deleted mid-run, an agent preempted as Spot nodes are, the budget's end, results,
delete.

One experiment lives through the whole test, in the order a user meets it: each stage needs the
one before (there is nothing to port-forward to before the pods run, nothing to fetch before the
budget is spent), and one small PPO run on 2 cores already takes minutes.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.support import (
    MARKS,
    SK,
    SMALL_RESOURCES,
    E2ECluster,
    RunFailedError,
    chromium,
    keep_artifact,
    screenshot,
    wait_for,
)
from tests.processes import running, stop

pytestmark = MARKS

NAME = "exp-e2e"
MAX_ENV_STEPS = 150_000
"""CartPole with 2 agents on their 150m slices: about 2 minutes on an idle machine (80,000 took
77 s), time enough to disturb it and look at TensorBoard before the budget ends it; while the
learner is away the agents wait for it (replay's samples-per-insert limiter)."""
RESUMED = re.compile(r"resumed from \S+ at iteration (\d+)")


def row(cluster: E2ECluster, name: str, *, failed_ok: bool = False) -> dict[str, Any] | None:
    """The experiment's row of `list -o json`; RunFailedError once it says Failed (unless failed_ok)."""
    rows = json.loads(cluster.sk("list", "-o", "json", timeout=60).stdout)
    found = next((r for r in rows if r["name"] == name), None)
    if found and found["phase"] == "Failed" and not failed_ok:
        raise RunFailedError(cluster.sk("status", name, check=False).stdout)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def pod_names(cluster: E2ECluster, name: str) -> list[str]:
    out = cluster.kubectl("get", "pods", "-l", f"app.kubernetes.io/instance={name}", "-o", "name")
    return [line.split("/", 1)[1] for line in out.split()]


def running_containers(cluster: E2ECluster, name: str) -> list[str]:
    """Containers of the experiment's pods that containerd still runs (by the kubelet's labels)."""

    def ctr(*args: str) -> str:
        return subprocess.run(
            cluster.node.ctr_command(*args), capture_output=True, text=True, check=True
        ).stdout

    ours = set(ctr("containers", "ls", "-q", f'labels."io.kubernetes.pod.name"~=^{name}-').split())
    return [t for t in running_tasks(cluster) if t in ours]


def kill_container(cluster: E2ECluster, pod: str, container: str) -> None:
    """SIGKILL a container's task through containerd, as an OOM kill or a crash would end it
    (from inside, PID 1 of the container cannot be sent SIGKILL)."""
    found = subprocess.run(
        cluster.node.ctr_command(
            "containers", "ls", "-q",
            f'labels."io.kubernetes.pod.name"=={pod},'
            f'labels."io.kubernetes.container.name"=={container}',
        ),
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    live = set(running_tasks(cluster))
    ids = [c for c in found if c in live]
    assert len(ids) == 1, (found, live)
    subprocess.run(
        cluster.node.ctr_command("tasks", "kill", "-s", "SIGKILL", ids[0]), check=True, timeout=60
    )


def running_tasks(cluster: E2ECluster) -> list[str]:
    out = subprocess.run(
        cluster.node.ctr_command("tasks", "ls"), capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    return [r[0] for r in rows if r and r[-1] == "RUNNING"]


PROBE = "curve-probe"
"""Not `<experiment>-...`: no selector or teardown check of the experiment's pods matches it."""


def curve_probe(cluster: E2ECluster, name: str, work: Path) -> dict[str, dict[str, list[str]]]:
    """Run tests/e2e/curve_probe.py in a pod beside the experiment's: its agent's pod spec (the
    same security context, image and key mount, the experiment's label that the NetworkPolicy
    admits) with the probe as its only container, against every Service address the agent
    connects to. What each handshake saw, per address and mode."""
    from surreal_kube.launch.kube import naming

    agent = next(p for p in pod_names(cluster, name) if "-agents-" in p)
    spec = json.loads(cluster.kubectl("get", "pod", agent, "-o", "json"))["spec"]
    (role,) = [c for c in spec["containers"] if c["name"] == "agents"]
    key_mounts = [m for m in role["volumeMounts"] if m["name"] == "curve"]
    # SURREAL_PS_SERVE_ADDR=tcp://... -> ps-serve=tcp://...: the Services it dials (not in-pod ones)
    addrs = sorted(
        f"{e['name'][len('SURREAL_') : -len('_ADDR')].lower().replace('_', '-')}={e['value']}"
        for e in role["env"]
        if e["name"].endswith("_ADDR") and ".svc." in str(e.get("value", ""))
    )
    assert key_mounts and addrs, role
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE, "labels": {naming.EXPERIMENT_LABEL: name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": spec.get("securityContext", {}),
            "nodeSelector": spec.get("nodeSelector", {}),
            "tolerations": spec.get("tolerations", []),
            "volumes": [v for v in spec["volumes"] if v["name"] == "curve"],
            "containers": [{
                "name": "probe",
                "image": role["image"],
                "imagePullPolicy": role.get("imagePullPolicy", "IfNotPresent"),
                "command": ["python", "-c", (Path(__file__).parent / "curve_probe.py").read_text(),
                            *addrs],
                "env": [e for e in role["env"] if e["name"] == "SURREAL_CURVE_KEYS"],
                "volumeMounts": key_mounts,
                "securityContext": role.get("securityContext", {}),
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                              "limits": {"memory": "256Mi"}},
            }],
        },
    }  # fmt: skip
    manifest = work / "probe.json"
    manifest.write_text(json.dumps(pod))
    cluster.kubectl("create", "-f", str(manifest))
    try:

        def finished() -> str | None:
            phase = cluster.kubectl("get", "pod", PROBE, "-o", "jsonpath={.status.phase}")
            return phase if phase in ("Succeeded", "Failed") else None

        phase = wait_for("the probe pod to finish", finished, timeout=180)
        log = cluster.kubectl("logs", PROBE)
        assert phase == "Succeeded", log
        return json.loads(log.strip().splitlines()[-1])
    finally:
        cluster.kubectl("delete", "pod", PROBE, "--wait=false", check=False)


def test_create_watch_disturb_finish_fetch_delete(e2e: E2ECluster, tmp_path: Path) -> None:
    spec = tmp_path / "small.yaml"
    spec.write_text(SMALL_RESOURCES)
    t0 = time.monotonic()
    # --- create with default settings (the cluster's default StorageClass, discovered pools)
    e2e.sk(
        "create", NAME, "-a", "ppo", "-e", "gym:CartPole-v1",
        "--num-agents", "2", "--num-evals", "1",
        "--max-env-steps", str(MAX_ENV_STEPS),
        "-f", str(spec), "--image", f"cpu={e2e.image}",
        "--timeout", "900",
        timeout=960,
    )  # fmt: skip
    running_s = time.monotonic() - t0
    status = e2e.status(NAME)
    assert status["phase"] == "Running", status
    for proc in status["processes"].values():
        assert proc["node"] == "real-0" and proc["ready"], proc

    # --- learner iterations advance; the eval return shows in status and list
    first = wait_for(
        "a learner iteration in list",
        lambda: (r := row(e2e, NAME)) and r["learnerIteration"] and r,
        timeout=600,
    )
    first_update_s = time.monotonic() - t0
    wait_for(
        "the learner iteration to advance",
        lambda: (r := row(e2e, NAME)) and r["learnerIteration"] > first["learnerIteration"],
        timeout=300,
    )
    evaluated = wait_for(
        "an eval return in list",
        lambda: (r := row(e2e, NAME)) and r["evalReturn"] is not None and r,
        timeout=600,
    )
    shown = e2e.sk("status", NAME, timeout=60).stdout
    assert "eval return" in shown and "eval return -" not in shown, shown

    # --- kill an agent's container and delete the learner's pod: both come back, the learner
    # resumes from its checkpoint (checkpoint.period is 5 iterations: wait for one first)
    wait_for(
        "a learner checkpoint (iteration 6)",
        lambda: (r := row(e2e, NAME)) and (r["learnerIteration"] or 0) >= 6,
        timeout=600,
    )
    kill_container(e2e, f"{NAME}-agents-0", "agents")
    learner = next(p for p in pod_names(e2e, NAME) if "-learner-" in p)
    e2e.kubectl("delete", "pod", learner, "--wait=false")
    wait_for(
        "a new learner pod, ready",
        lambda: any(
            "-learner-" in pod and proc["ready"] and pod != learner
            for pod, proc in e2e.status(NAME)["processes"].items()
        ),
        timeout=600,
    )
    agent = e2e.status(NAME)["processes"][f"{NAME}-agents-0"]
    assert agent["restarts"] >= 1, agent
    resumed = wait_for(
        "the new learner's resume line",
        lambda: RESUMED.search(e2e.sk("logs", NAME, "learner", timeout=60).stdout),
        timeout=300,
    )
    assert int(resumed.group(1)) >= 5, resumed.group(0)

    # --- a Spot preemption (issue 27 item 3): GKE deletes the pods of a reclaimed node with at
    # most 15 s of grace. The agent stops cleanly within it (it flushes what it has not sent,
    # rather than being SIGKILLed at the end of the grace), a new agent pod takes its place and
    # the run goes on to its end below
    agent_pod = f"{NAME}-agents-0"
    wait_for(
        "agents-0 ready again after its kill",
        lambda: e2e.status(NAME)["processes"][agent_pod]["ready"],
        timeout=300,
    )
    old_uid = e2e.kubectl("get", "pod", agent_pod, "-o", "jsonpath={.metadata.uid}")
    with running(
        [str(Path(e2e.cp.bin_dir) / "kubectl"), "logs", "-f", agent_pod, "-c", "agents",
         "--tail=1"],
        env=e2e.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as follow:  # fmt: skip
        assert follow.stdout is not None
        follow.stdout.readline()  # the log's last line: the stream is open before the SIGTERM
        e2e.kubectl("delete", "pod", agent_pod, "--grace-period=15", "--wait=true", timeout=120)
        last_lines, _ = follow.communicate(timeout=60)
    assert "stopped (SIGTERM)" in last_lines, last_lines[-3000:]
    wait_for(
        "a new agents-0 pod, ready",
        lambda: (
            e2e.kubectl("get", "pod", agent_pod, "-o", "jsonpath={.metadata.uid}", check=False)
            not in ("", old_uid)
            and e2e.status(NAME)["processes"][agent_pod]["ready"]
        ),
        timeout=300,
    )

    # --- inside the boundary, a pod without the secret key is refused by every endpoint it can
    # reach (issue 25): in plain text, and with a keypair of its own; the same pod with the
    # experiment's key gets through (the control: the address is right, the network lets it in).
    # On the sealed paths the refusal is per message: no parameters for a fetch without the key
    seen = curve_probe(e2e, NAME, tmp_path)
    print("curve probe:", json.dumps(seen))
    assert len(seen) >= 3, seen  # the parameter server, replay, tensorplex, loggerplex
    assert any(a.startswith("ps-serve=") for a in seen), seen
    for addr, modes in seen.items():
        if addr.startswith(("ps-serve=", "replay-collector")):
            # sealed paths: plain sockets; what a peer without the key sends is refused message
            # by message (tests/comm/test_seal.py counts the collectors' drops)
            for mode in ("plain", "stranger", "member"):
                assert "HANDSHAKE_SUCCEEDED" in modes[mode], (addr, mode, modes)
            if addr.startswith("ps-serve="):
                assert modes["member"][-1] == "ANSWER:params", modes
                assert modes["plain"][-1] == modes["stranger"][-1] == "ANSWER:none", modes
            continue
        assert "HANDSHAKE_SUCCEEDED" in modes["member"], (addr, modes)
        for mode in ("plain", "stranger"):
            assert "CONNECTED" in modes[mode], (addr, mode, modes)
            assert "HANDSHAKE_SUCCEEDED" not in modes[mode], (addr, mode, modes)

    # --- TensorBoard through the port-forward: the eval curve, and a screenshot of the page
    port = free_port()
    with running(
        [*SK, "tb", NAME, "--port", str(port)],
        env=e2e.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as tb:
        base = f"http://127.0.0.1:{port}"
        tags = wait_for(
            "TensorBoard's scalar tags through the forward",
            lambda: get_json(f"{base}/data/plugin/scalars/tags"),
            timeout=300,
        )
        eval_tags = [t for run in tags.values() for t in run if "eval" in t and "return" in t]
        assert eval_tags, tags
        if chromium():
            shot = tmp_path / "tensorboard.png"
            screenshot(f"{base}/#scalars&tagFilter=eval_return", shot)
            assert shot.stat().st_size > 10_000
            keep_artifact(shot, "tensorboard.png")
        stop(tb)
        assert tb.returncode == 0, tb.returncode

    # --- the budget ends it: final evaluation, Succeeded, no pod left, results fetched
    done = wait_for(
        "phase Succeeded",
        lambda: (
            (r := row(e2e, NAME, failed_ok=True)) and r["phase"] in ("Succeeded", "Failed") and r
        ),
        timeout=1200,
        every=5,
    )
    succeeded_s = time.monotonic() - t0
    assert done["phase"] == "Succeeded", e2e.sk("status", NAME, check=False).stdout
    wait_for("no pod of the experiment", lambda: not pod_names(e2e, NAME), timeout=180)
    out = tmp_path / "results"
    e2e.sk("results", NAME, "-o", str(out), timeout=60)
    summary = json.loads((out / "summary.json").read_text())
    assert summary.get("final_return") is not None, summary
    assert (out / "learning_curve.png").stat().st_size > 10_000
    keep_artifact(out / "learning_curve.png", "learning_curve.png")

    # --- delete --wait: nothing of the experiment is left but its data, as delete said
    deleted = e2e.sk("delete", NAME, "--wait", "--timeout", "300", timeout=360)
    said = deleted.stdout + deleted.stderr
    assert "kept" in said.lower(), said
    for kind in ("pods", "services", "configmaps", "deployments", "statefulsets"):
        left = e2e.kubectl("get", kind, "-l", f"app.kubernetes.io/instance={NAME}", "-o", "name")
        assert not left.strip(), (kind, left)
    claims = e2e.kubectl("get", "pvc", "-o", "name")
    assert f"{NAME}-data" in claims, claims
    assert not running_containers(e2e, NAME)

    timings = {
        "create_to_running_s": round(running_s, 1),
        "create_to_first_update_s": round(first_update_s, 1),
        "create_to_succeeded_s": round(succeeded_s, 1),
        "first_eval_return": evaluated["evalReturn"],
        "final_return": summary.get("final_return"),
    }
    (tmp_path / "timings.json").write_text(json.dumps(timings, indent=2))
    keep_artifact(tmp_path / "timings.json", "timings.json")
    print("e2e timings:", timings)
