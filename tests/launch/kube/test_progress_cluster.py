"""The progress channel against the real API server (RBAC on): tensorplex, run here as a local
process with the reporter ServiceAccount's own token, writes its experiment's progress record;
the API server refuses that token everything else; `status` and `list` show the figures.

No real node is needed: the writer runs on this machine, reaching the API server the in-cluster
way (KUBERNETES_SERVICE_HOST/PORT, a token file, the cluster CA), as it does in its pod.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.comm.metrics import MetricsClient
from surreal_kube.experiment import progress
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import resource
from surreal_kube.launch.kube.lifecycle import apply
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.runtime.reporter import ConfigMapWriter
from tests.launch.kube.reporter_support import in_cluster_env, reporter_secrets, writer_for
from tests.operator.support import IMAGES, connect, sk, wait_for
from tests.runtime.harness import LocalRun

pytestmark = pytest.mark.cluster

CONFIG_MAP = resource("v1", "ConfigMap")


def create_direct(kube: Any, name: str, namespace: str) -> None:
    """What `create --direct` applies: the rendered objects, the spec's ConfigMap as the root."""
    from surreal_kube.experiment.resolve import resolve_experiment

    exp = resolve_experiment(name, sets=["agents.count=2", "evals.count=1"])
    apply.create_objects(kube, render_experiment(exp, namespace, images=IMAGES), namespace)


def record_of(kube: Any, name: str) -> progress.Record | None:
    return progress.from_configmap(kube.get_or_none(CONFIG_MAP, naming.progress_name(name)))


def test_tensorplex_writes_its_progress_and_may_write_nothing_else(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns, name, other = kube_namespace, "exp-prog", "exp-other"
    kube = connect(kube_cluster, ns)
    create_direct(kube, name, ns)
    create_direct(kube, other, ns)
    assert record_of(kube, name) is None  # created empty: nothing invented

    secrets = reporter_secrets(kube_cluster, kube, name, ns, tmp_path / "reporter")
    env = in_cluster_env(kube_cluster, name, secrets)
    run = LocalRun(tmp_path, {"agents": {"count": 2}, "evals": {"count": 1}}, name=name)
    try:
        tensorplex = run.start("tensorplex", {**run.env("tensorplex"), **env})
        addr = run.addr("tensorplex")
        learner = MetricsClient(addr, "learner")
        agents = MetricsClient(addr, "agents-0", group="agents", index=0)
        evals = MetricsClient(addr, "evals-0", group="evals", index=0)

        def reported() -> bool:
            learner.add_scalars(
                {"learner/iteration": 42, "learner/iterations_per_s": 2.5}, step=5000
            )
            agents.add_scalars({"agent/env_steps_per_s": 300.0}, step=5000, index=0)
            agents.add_scalars({"agent/env_steps_per_s": 200.0}, step=5000, index=1)
            evals.add_scalars({"charts/eval_return": 12.5}, step=4000)
            rec = record_of(kube, name)
            assert tensorplex.poll() is None, run.log_path("tensorplex").read_text()
            return rec is not None and rec.last_return == 12.5

        wait_for("tensorplex's progress record", reported, timeout=90)
        rec = record_of(kube, name)
        assert rec is not None
        assert (rec.state, rec.iteration, rec.env_steps) == ("running", 42, 5000)
        assert (rec.env_steps_per_s, rec.iterations_per_s) == (500.0, 2.5)

        # `status -o json` and `list` show the figures
        res = sk(kube_cluster, "status", name, "-n", ns, "-o", "json")
        assert res.returncode == 0, res.stderr
        st = json.loads(res.stdout)
        assert (st["learnerIteration"], st["envSteps"], st["envStepsPerSecond"]) == (
            42, 5000, 500.0,
        )  # fmt: skip
        assert st["evalReturn"] == 12.5 and st["progress"] == "running"
        human = sk(kube_cluster, "status", name, "-n", ns)
        assert "learner iteration 42" in human.stdout and "env steps 5,000" in human.stdout
        listing = sk(kube_cluster, "list", "-n", ns, "-o", "json")
        assert listing.returncode == 0, listing.stderr
        rows = {r["name"]: r for r in json.loads(listing.stdout)}
        assert (rows[name]["learnerIteration"], rows[name]["envSteps"]) == (42, 5000)
        assert rows[name]["evalReturn"] == 12.5
        assert rows[other]["learnerIteration"] is None  # nothing reported: nothing shown
        table = sk(kube_cluster, "list", "-n", ns).stdout
        (line,) = [x for x in table.splitlines() if x.startswith(name + " ")]
        assert line.split()[5:8] == ["42", "5,000", "12.5"]
    finally:
        run.close()
    log = run.log_path("tensorplex").read_text()
    assert secrets.joinpath("token").read_text() not in log
    assert "cannot report progress" not in log
    assert record_of(kube, name).state == "stopped"  # type: ignore[union-attr]

    # The token may write its own progress record and nothing else.
    def writer(configmap: str) -> ConfigMapWriter:
        return writer_for(kube_cluster, name, secrets, configmap)  # type: ignore[no-any-return]

    writer(naming.progress_name(name)).write(progress.Record(state="running").to_json())
    for target in (naming.progress_name(other), naming.config_name(name)):
        with pytest.raises(PermissionError):
            writer(target).write("{}")
    refused = _as_reporter(writer(naming.progress_name(name)))
    for method, path in (
        ("GET", f"/api/v1/namespaces/{ns}/configmaps"),  # no list, even of its own namespace
        ("GET", f"/api/v1/namespaces/{ns}/pods"),
        ("GET", f"/api/v1/namespaces/{ns}/secrets"),
        ("GET", f"/api/v1/namespaces/{ns}/configmaps/{naming.progress_name(other)}"),
        ("DELETE", f"/api/v1/namespaces/{ns}/configmaps/{naming.progress_name(name)}"),
        ("POST", f"/api/v1/namespaces/{ns}/configmaps"),
        ("GET", "/api/v1/namespaces/default/configmaps/" + naming.progress_name(name)),
    ):
        assert refused(method, path) == 403, (method, path)
    assert refused("GET", f"/api/v1/namespaces/{ns}/configmaps/{naming.progress_name(name)}") == 200


def _as_reporter(w: ConfigMapWriter) -> Any:
    """A raw request with the reporter's token: the HTTP status the API server answers."""
    import http.client

    token = (w.secrets / "token").read_text().strip()

    def send(method: str, path: str) -> int:
        conn = http.client.HTTPSConnection(w.host, w.port, timeout=10, context=w._context)
        try:
            body = "{}" if method == "POST" else None
            conn.request(
                method,
                path,
                body=body,
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    return send


def test_a_reporter_whose_binding_is_gone_is_refused(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    """The rights come from the RoleBinding alone: without it the same token writes nothing."""
    ns, name = kube_namespace, "exp-norole"
    kube = connect(kube_cluster, ns)
    create_direct(kube, name, ns)
    secrets = reporter_secrets(kube_cluster, kube, name, ns, tmp_path / "reporter")
    binding = resource("rbac.authorization.k8s.io/v1", "RoleBinding")
    kube.delete(binding, naming.reporter_name(name), ns)
    w = writer_for(kube_cluster, name, secrets)

    def refused() -> bool:
        try:
            w.write(progress.Record().to_json())
        except PermissionError:
            return True
        return False

    # The API server's RBAC cache drops the binding a moment after the delete, so writes during
    # that moment may still land (CI saw one): what matters is what is refused once it has.
    wait_for("the authorizer to drop the binding", refused, timeout=30)
    marker = progress.Record(state="running", iteration=7, env_steps=700)
    for _ in range(3):
        with pytest.raises(PermissionError):
            w.write(marker.to_json())
    rec = record_of(kube, name)
    assert rec is None or rec.iteration != 7, rec
