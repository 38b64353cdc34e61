"""The end of a run on a cluster (runtime/conductor.py), against the real API server (RBAC on).

The experiment is rendered and applied as `create --direct` does (no operator), its pods run on
kwok nodes. Its tensorplex runs here as a real process with the reporter ServiceAccount's own
token and the environment its pod gets (tests/launch/kube/reporter_support.py); the test sends it
metrics over its real ZeroMQ socket the way the learner, agents and evals do (comm/metrics.py).
Budget reached -> final evaluation awaited -> results on the volume and in `<exp>-results` ->
record finished -> every workload scaled to 0 -> `status` says Succeeded and `results` fetches
the files; a restarted tensorplex keeps the start time and releases again; the token can do
nothing else.
"""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.comm.metrics import MetricsClient
from surreal_kube.experiment import progress
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import resource
from surreal_kube.launch.kube.lifecycle import apply
from surreal_kube.launch.kube.profile import profile_from_dict
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.runtime.reporter import ConfigMapWriter
from tests.launch.kube.reporter_support import in_cluster_env, reporter_secrets, writer_for
from tests.operator.support import IMAGES, connect, objects_of, sk, wait_for
from tests.runtime.harness import LocalRun

pytestmark = pytest.mark.cluster

CONFIG_MAP = resource("v1", "ConfigMap")
DEPLOY = resource("apps/v1", "Deployment")
STS = resource("apps/v1", "StatefulSet")
POD = resource("v1", "Pod")
BUDGET = 1000
COMPONENTS = ("learner", "agent", "eval", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")
SPEC = {
    "agents": {"count": 2},
    "evals": {"count": 1, "episodes": 3},
    "session": {"maxEnvSteps": BUDGET},
    # small pods: tests share the simulated nodes
    "resources": {c: {"cpu": "10m", "memory": "16Mi"} for c in COMPONENTS},
}
PROFILE = profile_from_dict({"experimentVolume": {"kind": "emptyDir"}})


def create_direct(kube: Any, run: LocalRun, namespace: str) -> list[dict[str, Any]]:
    """What `create --direct` applies for the run's experiment (the spec's ConfigMap as root)."""
    objects = render_experiment(run.exp, namespace, images=IMAGES, profile=PROFILE)
    apply.create_objects(kube, objects, namespace)
    return objects


def pod_env(objects: list[dict[str, Any]], name: str) -> dict[str, str]:
    """The tensorplex container's variables that say what to release and where the results go."""
    (deploy,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    return {
        e["name"]: e["value"]
        for e in container["env"]
        if e["name"] in ("SURREAL_RESULTS_CONFIGMAP", "SURREAL_RELEASE_WORKLOADS")
    }


def record_of(kube: Any, name: str) -> progress.Record | None:
    return progress.from_configmap(kube.get_or_none(CONFIG_MAP, naming.progress_name(name)))


def replicas(kube: Any, name: str) -> dict[str, int]:
    return {
        o["metadata"]["name"]: o["spec"]["replicas"] for o in objects_of(kube, name, [DEPLOY, STS])
    }


def as_reporter(w: ConfigMapWriter) -> Any:
    """A raw request with the reporter's token: the HTTP status the API server answers."""
    token = (w.secrets / "token").read_text().strip()

    def send(method: str, path: str, body: dict[str, Any] | None = None) -> int:
        conn = http.client.HTTPSConnection(w.host, w.port, timeout=10, context=w._context)
        try:
            conn.request(
                method,
                path,
                body=None if body is None else json.dumps(body),
                headers={
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/merge-patch+json",
                },
            )
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    return send


def test_the_budget_ends_the_run_with_results_succeeded_and_no_pods(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name, other = kube_namespace, "exp-end", "exp-end-other"
    kube = connect(kube_cluster, ns)
    run = LocalRun(tmp_path, SPEC, name=name)
    objects = create_direct(kube, run, ns)
    create_direct(kube, LocalRun(tmp_path, SPEC, name=other), ns)
    wait_for("the pods to run", lambda: all(replicas(kube, name).values()) and _running(kube, name))

    # before any result: `results` says what the run is doing, in one line
    res = sk(kube_cluster, "results", name, "-n", ns, "-o", str(tmp_path / "early"))
    assert res.returncode == 1
    assert re.match(rf"error: {name} has no results yet: it is (Running|Pending) \(", res.stderr)
    assert res.stderr.strip().endswith("they are written when the run reaches its budget")
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "early").exists()

    secrets = reporter_secrets(kube_cluster, kube, name, ns, tmp_path / "reporter")
    env = {
        **run.env("tensorplex"),
        **in_cluster_env(kube_cluster, name, secrets),
        **pod_env(objects, naming.object_name(name, "tensorplex")),
    }
    assert env["SURREAL_RELEASE_WORKLOADS"].endswith(f"deployments/{name}-tensorplex")
    try:
        run.start("tensorplex", env)
        addr = run.addr("tensorplex")
        learner = MetricsClient(addr, "learner")
        agents = [MetricsClient(addr, f"agents-{i}", group="agents", index=i) for i in range(2)]
        evals = MetricsClient(addr, "evals-0", group="evals", index=0)
        curve = run.dir / "results" / "curve.jsonl"

        def evaluation(ret: float, version: int, steps: int) -> None:
            evals.add_scalars(
                {"charts/eval_return": ret, "charts/eval_return_std": 2.0,
                 "eval/param_version": version},
                step=steps,
            )  # fmt: skip

        learner.add_scalars(
            {"learner/iteration": 5, "learner/published_iteration": 4,
             "learner/global_env_steps": 900, "lag/mean": 1.0, "replay/samples_per_insert": 1.0},
            step=900,
        )  # fmt: skip
        evaluation(10.0, 1, 300)
        wait_for("the first point", lambda: curve.exists() and curve.read_text().count("\n") == 1)
        wait_for("a start time", lambda: (r := record_of(kube, name)) and r.started_at)
        started = record_of(kube, name).started_at  # type: ignore[union-attr]

        # the agents took their shares: the budget; a final evaluation is awaited
        for agent in agents:
            agent.add_scalars({"agent/env_steps": BUDGET // 2, "agent/budget_done": 1.0}, step=900)
        run.wait_log("tensorplex", "waiting for a final evaluation of parameters >= version 4", 30)
        # an evaluation of older parameters is not the final one
        evaluation(20.0, 3, 600)
        before = record_of(kube, name).updated_at  # type: ignore[union-attr]
        wait_for(
            "two more progress writes",
            lambda: (record_of(kube, name).updated_at or 0) > before + 6,  # type: ignore[union-attr]
            timeout=30,
        )
        assert record_of(kube, name).state == "running"  # type: ignore[union-attr]
        assert all(replicas(kube, name).values())
        evaluation(42.0, 4, 900)

        done = wait_for(
            "the results ConfigMap",
            lambda: ((kube.get(CONFIG_MAP, naming.results_name(name)).get("data")) or {}).get(
                "summary.json"
            ),
            timeout=60,
        )
        summary = json.loads(done)
        assert (summary["phase"], summary["reason"]) == (
            "Succeeded", f"reached {BUDGET} env steps",
        )  # fmt: skip
        assert (summary["final_return"], summary["final_param_version"]) == (42.0, 4)
        assert (summary["best_return"], summary["evaluations"]) == (42.0, 3)
        assert summary["env_steps"] == BUDGET and summary["final_return_std"] == 2.0
        assert summary["episodes_per_evaluation"] == 3 and summary["learner_iterations"] == 5
        assert summary["policy_lag"] == {"mean": 1.0} and summary["restarts"] is None

        # finished, with the reason; then every workload at 0, tensorplex's own last
        rec = wait_for("the finished record", lambda: (r := record_of(kube, name)).state
                       == "finished" and r)  # fmt: skip
        assert rec.reason == f"reached {BUDGET} env steps" and rec.last_return == 42.0
        assert rec.started_at == started
        wait_for("every workload at 0", lambda: not any(replicas(kube, name).values()))
        assert all(replicas(kube, other).values())  # the other experiment runs on
        run.wait_log("tensorplex", f"scaled deployments/{name}-tensorplex to 0")
        log = run.log_path("tensorplex").read_text()
        assert (
            log.index(f"scaled statefulsets/{name}-agents")
            < log.index(f"scaled deployments/{name}-learner")
            < log.index(f"scaled deployments/{name}-tensorplex")
        )
        wait_for("no pod left", lambda: not objects_of(kube, name, [POD]), timeout=90)

        # on the volume too: the same files
        assert json.loads((run.dir / "results" / "summary.json").read_text()) == summary
        assert (run.dir / "results" / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"

        # `status` and `list`: Succeeded, the final return, no pods is no failure
        res = sk(kube_cluster, "status", name, "-n", ns, "-o", "json")
        assert res.returncode == 0, res.stderr
        st = json.loads(res.stdout)
        assert st["phase"] == "Succeeded" and st["evalReturn"] == 42.0
        assert st["reason"] == (
            f"finished: reached {BUDGET} env steps; final return 42.00; compute released (no pods)"
        )
        assert all(not c.get("pending") for c in st["components"].values())
        human = sk(kube_cluster, "status", name, "-n", ns).stdout
        assert "phase Succeeded" in human and "final return 42.00" in human
        rows = {r["name"]: r for r in json.loads(sk(kube_cluster, "list", "-n", ns, "-o",
                                                    "json").stdout)}  # fmt: skip
        assert rows[name]["phase"] == "Succeeded" and rows[name]["evalReturn"] == 42.0
        assert rows[other]["phase"] == "Running"

        # `results` fetches the three files, with no pod to ask
        out = tmp_path / "fetched"
        res = sk(kube_cluster, "results", name, "-n", ns, "-o", str(out))
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == [
            str(out / "summary.json"), str(out / "learning_curve.png"), str(out / "curve.jsonl"),
        ]  # fmt: skip
        assert f"{name}: Succeeded (reached {BUDGET} env steps), final return 42.00" in res.stderr
        assert json.loads((out / "summary.json").read_text()) == summary
        assert (out / "learning_curve.png").read_bytes() == (
            run.dir / "results" / "learning_curve.png"
        ).read_bytes()
        points = [json.loads(x) for x in (out / "curve.jsonl").read_text().splitlines()]
        assert [(p["env_steps"], p["eval_return"], p["param_version"]) for p in points] == [
            (300, 10.0, 1), (600, 20.0, 3), (900, 42.0, 4),
        ]  # fmt: skip

        # `scale` of a finished run is refused: it would start agents with no learner and no
        # budget left to end them (before, it re-applied the agents' StatefulSet)
        res = sk(kube_cluster, "scale", name, "--agents", "4", "-n", ns)
        assert res.returncode == 1 and "has finished" in res.stderr, res.stderr
        assert not any(replicas(kube, name).values())

        # a tensorplex that comes back (its Deployment scaled up by hand) keeps the start time
        # and the finished state, and releases again
        code, _ = run.terminate("tensorplex", timeout=30)
        assert code == 0
        assert record_of(kube, name).state == "finished"  # type: ignore[union-attr]
        kube.patch(DEPLOY, naming.object_name(name, "learner"), {"spec": {"replicas": 1}})
        run.log_path("tensorplex").unlink()
        run.start("tensorplex", env)
        wait_for("the learner released again", lambda: not any(replicas(kube, name).values()),
                 timeout=60)  # fmt: skip
        rec = record_of(kube, name)
        assert rec is not None and rec.state == "finished" and rec.started_at == started
    finally:
        run.close()
    log = run.log_path("tensorplex").read_text()
    assert secrets.joinpath("token").read_text() not in log

    # least privilege: its own workloads' scale and results, by name, and nothing else
    send = as_reporter(writer_for(kube_cluster, name, secrets))
    apps = f"/apis/apps/v1/namespaces/{ns}"
    zero = {"spec": {"replicas": 0}}
    assert send("PATCH", f"{apps}/deployments/{name}-learner/scale", zero) == 200
    for method, path, body in (
        ("PATCH", f"{apps}/deployments/{other}-learner/scale", zero),
        ("PATCH", f"{apps}/statefulsets/{other}-agents/scale", zero),
        ("PATCH", f"{apps}/deployments/{name}-learner", zero),  # the workload itself: no
        ("GET", f"{apps}/deployments/{name}-learner/scale", None),
        ("GET", f"{apps}/deployments", None),
        ("DELETE", f"{apps}/deployments/{name}-learner", None),
        ("PATCH", f"/api/v1/namespaces/{ns}/configmaps/{naming.results_name(other)}", {}),
        ("GET", f"/api/v1/namespaces/{ns}/configmaps/{naming.results_name(name)}", None),
        ("PATCH", f"/api/v1/namespaces/{ns}/configmaps/{naming.config_name(name)}", {}),
    ):
        assert send(method, path, body) == 403, (method, path)
    assert all(replicas(kube, other).values())


def _running(kube: Any, name: str) -> bool:
    pods = objects_of(kube, name, [POD])
    return bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)
