"""The operator as a process against the test control plane, reconciling `Experiment` objects.

Each test runs `python -m surreal_kube.operator --namespace <its namespace>` (as the chart's
Deployment does) and drives it the way users do: the CLI, `kubectl`, edits of the object,
deleted and failing pods, and a kill of the operator itself.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from surreal_kube.experiment import progress
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import EXPERIMENT, InvalidError, resource
from surreal_kube.launch.kube.profile import load_profile
from surreal_kube.launch.kube.render.custom_resource import experiment_object
from surreal_kube.launch.kube.render.objects import render_experiment
from tests.launch.kube.reporter_support import write_progress
from tests.operator.support import (
    APPLIED_KINDS,
    IMAGE_ARGS,
    IMAGES,
    SPEC_IMAGES,
    TINY,
    connect,
    ensure_crd,
    fail_pod,
    kubectl,
    names_of,
    normalized,
    objects_of,
    pod_uid,
    profile_file,
    running_operator,
    running_pods,
    sk,
    wait_for,
)

pytestmark = pytest.mark.cluster

POD = resource("v1", "Pod")
STS = resource("apps/v1", "StatefulSet")
DEPLOY = resource("apps/v1", "Deployment")
SVC = resource("v1", "Service")
TINY_SETS = [a for a in TINY if a != "--set"]


@pytest.fixture
def kube(kube_cluster: Any, kube_namespace: str) -> Any:
    k = connect(kube_cluster, kube_namespace)
    ensure_crd(k)
    return k


def settled(read: Any, quiet: float = 2.0, timeout: float = 60.0) -> Any:
    """What `read()` returns once it stopped changing for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return last
    raise AssertionError(f"still changing after {timeout:.0f}s: {last!r}")


def reported(kube: Any, name: str) -> dict[str, Any]:
    return (kube.get_or_none(EXPERIMENT, name) or {}).get("status") or {}


def running(kube: Any, name: str) -> dict[str, Any] | None:
    st = reported(kube, name)
    return st if st.get("phase") == "Running" else None


def create_object(kube: Any, name: str, *sets: str) -> dict[str, Any]:
    """An Experiment object as a user would apply it (kubectl apply of a resolved spec)."""
    exp = resolve_experiment(name, sets=[*SPEC_IMAGES, *TINY_SETS, *sets])
    obj = experiment_object(exp, kube.namespace)
    return kube.apply(obj)


def test_operator_makes_what_the_cli_makes_and_reports_it(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-op"
    profile = str(profile_file(tmp_path))
    args = [
        "create",
        name,
        "-n",
        ns,
        "--profile",
        profile,
        *IMAGE_ARGS,
        *TINY,
        "--num-agents",
        "4",
        "--agent-batch",
        "2",
    ]
    # first the CLI applies it directly: the reference objects
    res = sk(kube_cluster, *args, "--direct")
    assert res.returncode == 0, res.stderr
    direct = {
        f"{o['kind']}/{o['metadata']['name']}": normalized(o)
        for o in objects_of(kube, name, APPLIED_KINDS)
    }
    assert sk(kube_cluster, "delete", name, "--wait", "-n", ns).returncode == 0

    with running_operator(kube_cluster, ns, tmp_path, "--profile", profile):
        res = sk(kube_cluster, *args)
        assert res.returncode == 0, res.stderr
        assert "through the operator" in res.stderr and "applied Experiment/exp-op" in res.stderr
        assert f"{name} is running: 9/9 pods, 4/4 agents" in res.stderr
        via = {
            f"{o['kind']}/{o['metadata']['name']}": normalized(o)
            for o in objects_of(kube, name, APPLIED_KINDS)
        }
        assert sorted(via) == sorted(direct)
        for key, obj in via.items():
            want = dict(direct[key])
            want["metadata"] = {**want["metadata"], "ownerKinds": ["Experiment"]}
            if key == f"ConfigMap/{name}-config":
                assert obj["metadata"]["ownerKinds"] == ["Experiment"]  # not the root any more
            assert obj == want, key
        cr = kube.get(EXPERIMENT, name)
        for obj in objects_of(kube, name, APPLIED_KINDS):
            (ref,) = obj["metadata"]["ownerReferences"]
            assert ref["uid"] == cr["metadata"]["uid"] and ref["kind"] == "Experiment"

        st = wait_for("the status", lambda: running(kube, name))
        assert st["ready"] == "9/9" and st["agents"] == "4/4" and st["agentsReady"] == 4
        assert st["components"]["agents"] == {
            "desired": 2,
            "ready": 2,
            "restarts": 0,
            "pending": {},
        }
        assert st["observedGeneration"] == cr["metadata"]["generation"]
        conds = {c["type"]: c for c in st["conditions"]}
        assert conds["Applied"]["status"] == "True" and conds["Ready"]["status"] == "True"

        # what tensorplex reports into <exp>-progress reaches the status and kubectl's columns
        # (written here with the reporter ServiceAccount's own token, as tensorplex does)
        write_progress(
            kube_cluster, kube, name, ns, tmp_path,
            progress.Record(
                state="running", iteration=42, env_steps=5000, env_steps_per_s=500.0,
                last_return=12.5,
            ),
        )  # fmt: skip
        wait_for(
            "the learner's iteration", lambda: reported(kube, name).get("learnerIteration") == 42
        )
        st = reported(kube, name)
        assert (st["envSteps"], st["envStepsPerSecond"], st["progress"]) == (5000, 500.0, "running")
        out = kubectl(kube_cluster, "get", "experiments", "-n", ns)
        assert out.returncode == 0, out.stderr
        header, row = out.stdout.strip().splitlines()
        assert header.split() == [
            "NAME",
            "PHASE",
            "READY",
            "AGENTS",
            "GPUS",
            "ITERATION",
            "STEPS",
            "STEPS/S",
            "RETURN",
            "AGE",
        ]
        assert row.split()[:9] == [
            name, "Running", "9/9", "4/4", "0", "42", "5000", "500", "12.5",
        ]  # fmt: skip
        wide = kubectl(kube_cluster, "get", "exp", name, "-n", ns, "-o", "wide").stdout
        assert (
            "ALGORITHM" in wide
            and "gym:HalfCheetah-v5" in wide
            and "all 9 pods are running" in wide
        )

        # the CLI reads it the same way
        listing = json.loads(sk(kube_cluster, "list", "-n", ns, "-o", "json").stdout)
        assert [(r["name"], r["via"], r["phase"], r["learnerIteration"]) for r in listing] == [
            (name, "operator", "Running", 42)
        ]
        status = json.loads(sk(kube_cluster, "status", name, "-n", ns, "-o", "json").stdout)
        assert status["via"] == "operator" and status["evalReturn"] == 12.5

        # delete: one delete of the Experiment, everything goes through ownership
        res = sk(kube_cluster, "delete", name, "--wait", "-n", ns)
        assert res.returncode == 0, res.stderr
        assert objects_of(kube, name) == [] and kube.get_or_none(EXPERIMENT, name) is None


def test_spec_edits_are_followed_without_touching_the_learner(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-edit"
    with running_operator(kube_cluster, ns, tmp_path, "--profile", str(profile_file(tmp_path))):
        create_object(kube, name, "agents.count=4", "agents.batch=2", "evals.count=1")
        wait_for("Running", lambda: running(kube, name))
        learner = pod_uid(kube, "learner", name)
        generation = kube.get(DEPLOY, f"{name}-learner")["metadata"]["generation"]

        res = sk(kube_cluster, "scale", name, "--agents", "8", "--wait", "-n", ns)
        assert res.returncode == 0, res.stderr
        assert "the operator applies it" in res.stderr
        assert running_pods(kube, name, "agents") == [f"{name}-agents-{i}" for i in range(4)]
        assert kube.get(EXPERIMENT, name)["spec"]["agents"]["count"] == 8
        wait_for("agents 8/8", lambda: reported(kube, name).get("agents") == "8/8")

        # kubectl scale goes through the same scale subresource; the CRD refuses a bad count
        out = kubectl(kube_cluster, "scale", "experiment", name, "-n", ns, "--replicas", "2")
        assert out.returncode == 0, out.stderr
        wait_for(
            "one agent pod", lambda: running_pods(kube, name, "agents") == [f"{name}-agents-0"]
        )
        out = kubectl(kube_cluster, "scale", "experiment", name, "-n", ns, "--replicas", "3")
        assert out.returncode != 0 and "agents.batch must divide agents.count" in out.stderr
        with pytest.raises(InvalidError, match=r"agents\.batch must divide agents\.count"):
            kube.patch(EXPERIMENT, name, {"spec": {"agents": {"count": 5}}})

        # evals: removed, then two of them
        kube.patch(EXPERIMENT, name, {"spec": {"evals": {"count": 0}}})
        wait_for("the evals to go", lambda: kube.get_or_none(STS, f"{name}-evals") is None)
        wait_for(
            "Running without evals",
            lambda: (s := running(kube, name)) and "evals" not in s["components"],
        )
        kube.patch(EXPERIMENT, name, {"spec": {"evals": {"count": 2}}})
        wait_for(
            "two evals",
            lambda: running_pods(kube, name, "evals") == [f"{name}-evals-0", f"{name}-evals-1"],
        )

        assert pod_uid(kube, "learner", name) == learner
        assert kube.get(DEPLOY, f"{name}-learner")["metadata"]["generation"] == generation
        generation = kube.get(EXPERIMENT, name)["metadata"]["generation"]
        wait_for(
            "the last edit to be observed",
            lambda: (s := running(kube, name)) and s.get("observedGeneration") == generation,
        )

        # a setting only evals read rolls the evals (their config digest changed), not the learner
        digest = "surreal.ai/config-digest"
        learner_generation = kube.get(DEPLOY, f"{name}-learner")["metadata"]["generation"]
        evals_before = kube.get(STS, f"{name}-evals")["spec"]["template"]["metadata"]
        kube.patch(EXPERIMENT, name, {"spec": {"evals": {"mode": "stochastic"}}})
        wait_for(
            "Applied to say the evals restart",
            lambda: applied_message(kube, name).endswith("restarting eval (evals changed)"),
        )
        evals_after = kube.get(STS, f"{name}-evals")["spec"]["template"]["metadata"]
        assert evals_after["annotations"][digest] != evals_before["annotations"][digest]
        assert pod_uid(kube, "learner", name) == learner
        assert kube.get(DEPLOY, f"{name}-learner")["metadata"]["generation"] == learner_generation

        # a hyper-parameter the learner reads restarts it, and the Applied condition says so
        kube.patch(EXPERIMENT, name, {"spec": {"algorithm": {"lrPolicy": 0.0003}}})
        wait_for(
            "Applied to say the learner restarts",
            lambda: (
                "restarting learner (algorithm changed); agent (algorithm changed)"
                in applied_message(kube, name)
            ),
        )
        assert kube.get(DEPLOY, f"{name}-learner")["metadata"]["generation"] > learner_generation


def applied_message(kube: Any, name: str) -> str:
    conditions = (kube.get(EXPERIMENT, name).get("status") or {}).get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "Applied"), "")


def test_what_disappears_is_recreated_and_failures_are_counted(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-heal"
    with running_operator(kube_cluster, ns, tmp_path, "--profile", str(profile_file(tmp_path))):
        create_object(kube, name)
        wait_for("Running", lambda: running(kube, name))
        before = names_of(objects_of(kube, name, APPLIED_KINDS))
        # a workload and a Service deleted by hand come back
        kube.delete(STS, f"{name}-agents")
        kube.delete(SVC, f"{name}-replay")
        wait_for(
            "the objects to be recreated",
            lambda: names_of(objects_of(kube, name, APPLIED_KINDS)) == before,
        )
        wait_for(
            "Running again",
            lambda: running(kube, name) and len(running_pods(kube, name, "agents")) == 2,
        )
        # a deleted agent pod is recreated (by its StatefulSet) and is not a failure
        kube.delete(POD, f"{name}-agents-1")
        wait_for("agents-1 back", lambda: f"{name}-agents-1" in running_pods(kube, name, "agents"))
        # a pod made to fail by kwok is replaced and counted as a restart
        fail_pod(kube, f"{name}-agents-0")
        record = wait_for(
            "the failure to be counted",
            lambda: reported(kube, name).get("replacements", {}).get(f"{name}-agents-0"),
        )
        assert record["count"] == 1
        st = wait_for(
            "Running with the restart",
            lambda: (s := running(kube, name)) and s["restarts"] == 1 and s,
        )
        assert st["components"]["agents"]["restarts"] == 1 and st["learnerRestarts"] == 0
        status = json.loads(sk(kube_cluster, "status", name, "-n", ns, "-o", "json").stdout)
        assert status["processes"][f"{name}-agents-0"]["restarts"] == 1
        assert status["processes"][f"{name}-agents-1"]["restarts"] == 0


def test_a_learner_out_of_restarts_fails_the_experiment(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-crash"
    with running_operator(
        kube_cluster,
        ns,
        tmp_path,
        "--profile",
        str(profile_file(tmp_path)),
        "--learner-max-restarts",
        "1",
    ):
        create_object(kube, name)
        wait_for("Running", lambda: running(kube, name))
        fail_pod(kube, running_pods(kube, name, "learner")[0])
        st = wait_for(
            "one learner restart",
            lambda: (s := running(kube, name)) and s["learnerRestarts"] == 1 and s,
        )
        assert st["phase"] == "Running"
        fail_pod(kube, wait_for("the new learner", lambda: running_pods(kube, name, "learner"))[0])
        st = wait_for("Failed", lambda: (s := reported(kube, name)).get("phase") == "Failed" and s)
        assert st["reason"] == (
            "the learner exhausted its 1 restarts (last: failed: container learner exited with code 1 "
            "(containerFailed)); its workloads were scaled to 0, data and logs are kept"
        )
        conds = {c["type"]: c for c in st["conditions"]}
        assert conds["Failed"]["reason"] == "LearnerRestartsExhausted"
        for obj in objects_of(kube, name, [STS, DEPLOY]):
            assert obj["spec"]["replicas"] == 0, obj["metadata"]["name"]
        wait_for(
            "no running pods",
            lambda: (
                not any(
                    p["status"].get("phase") == "Running" for p in objects_of(kube, name, [POD])
                )
            ),
        )
        # it stays Failed (no re-apply brings the pods back), and the CLI says why
        time.sleep(3)
        assert reported(kube, name)["phase"] == "Failed"
        res = sk(kube_cluster, "status", name, "-n", ns)
        assert "phase Failed" in res.stdout and "exhausted its 1 restarts" in res.stdout


def test_an_operator_killed_mid_reconcile_converges_after_a_restart(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-kill"
    profile = str(profile_file(tmp_path))
    exp = resolve_experiment(name, sets=[*SPEC_IMAGES, *TINY_SETS, "agents.count=3"])
    expected = names_of(render_experiment(exp, ns, images=IMAGES, profile=load_profile(profile)))
    with running_operator(kube_cluster, ns, tmp_path, "--profile", profile) as op:
        create_object(kube, name, "agents.count=3")
        # freeze it the moment its first object lands, then kill it
        wait_for(
            "the first object",
            lambda: objects_of(kube, name, [resource("v1", "ConfigMap")]),
            every=0.005,
        )
        os.killpg(op.proc.pid, signal.SIGSTOP)
        op.stop(signal.SIGKILL)
        # requests already on the wire (several at once) still land: count them as applied
        partial = settled(lambda: names_of(objects_of(kube, name, APPLIED_KINDS)))
        print(f"killed with {len(partial)}/{len(expected)} objects applied: {partial}")
        assert partial != [] and set(partial) <= set(expected)
        time.sleep(1)
        assert names_of(objects_of(kube, name, APPLIED_KINDS)) == partial  # nobody else applies
        op.start()
        wait_for("Running after the restart", lambda: running(kube, name), timeout=90)
        assert names_of(objects_of(kube, name, APPLIED_KINDS)) == expected
        assert len(running_pods(kube, name, "agents")) == 3
        # and a second restart changes nothing
        uids = {o["metadata"]["uid"] for o in objects_of(kube, name, APPLIED_KINDS)}
        op.stop()
        op.start()
        time.sleep(5)
        assert {o["metadata"]["uid"] for o in objects_of(kube, name, APPLIED_KINDS)} == uids
        assert running(kube, name)
        # no finalizer: deleting needs no operator (an uninstalled one must not block deletes)
        assert not kube.get(EXPERIMENT, name)["metadata"].get("finalizers")
        op.stop()
        res = sk(kube_cluster, "delete", name, "--wait", "-n", ns)
        assert res.returncode == 0, res.stderr
        assert objects_of(kube, name) == [] and kube.get_or_none(EXPERIMENT, name) is None


def test_an_experiment_that_cannot_be_placed_is_refused_and_create_leaves_nothing(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-huge"
    with running_operator(kube_cluster, ns, tmp_path, "--profile", str(profile_file(tmp_path))):
        create_object(kube, name, "resources.learner.gpu=8")
        cond = wait_for(
            "Applied=False",
            lambda: next(
                (c for c in reported(kube, name).get("conditions", []) if c["type"] == "Applied"),
                None,
            ),
        )
        assert cond["status"] == "False" and cond["reason"] == "InvalidSpec"
        assert (
            "cannot place learner" in cond["message"]
            and "nvidia.com/gpu 4 per node" in cond["message"]
        )
        assert objects_of(kube, name, APPLIED_KINDS) == []
        kube.delete(EXPERIMENT, name)
        # the CLI, told to skip its own pre-flight, hears the operator's refusal and cleans up
        res = sk(
            kube_cluster,
            "create",
            name,
            "-n",
            ns,
            "--profile",
            str(profile_file(tmp_path)),
            *IMAGE_ARGS,
            *TINY,
            "--set",
            "resources.learner.gpu=8",
            "--skip-preflight",
        )
        assert res.returncode == 1
        assert f"the operator cannot apply {name}: cannot place learner" in res.stderr
        assert f"{name} was deleted again" in res.stderr
        assert kube.get_or_none(EXPERIMENT, name) is None and objects_of(kube, name) == []


def test_without_an_operator_create_does_not_wait_forever(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-alone"
    res = sk(
        kube_cluster,
        "create",
        name,
        "-n",
        ns,
        "--profile",
        str(profile_file(tmp_path)),
        *IMAGE_ARGS,
        *TINY,
    )
    assert res.returncode == 1
    assert "no operator picked up exp-alone within 30s" in res.stderr
    assert "use --direct" in res.stderr
    assert kube.get_or_none(EXPERIMENT, name) is None
    assert naming.config_name(name) not in {o["metadata"]["name"] for o in objects_of(kube, name)}


def test_an_experiment_naming_builds_runs_on_the_operators_default_images(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns, name = kube_namespace, "exp-build"
    exp = resolve_experiment(name, sets=TINY_SETS)  # spec.images: the default builds
    profile = str(profile_file(tmp_path))
    with running_operator(kube_cluster, ns, tmp_path, "--profile", profile):
        kube.apply(experiment_object(exp, ns))
        cond = wait_for(
            "Applied=False",
            lambda: next(
                (c for c in reported(kube, name).get("conditions", []) if c["type"] == "Applied"),
                None,
            ),
        )
        assert cond["status"] == "False"
        assert cond["message"].startswith("spec.images.cpu: the operator cannot build images")
    ref = IMAGES["cpu"]
    with running_operator(
        kube_cluster, ns, tmp_path, "--profile", profile, "--default-image", f"cpu={ref}"
    ):
        wait_for("Running", lambda: running(kube, name), timeout=90)
        config = kube.get(resource("v1", "ConfigMap"), naming.config_name(name))["data"][
            "experiment.yaml"
        ]
        assert f"image: {ref}" in config  # the roles read the image that runs, not a build
        images = {
            c["image"]
            for o in objects_of(kube, name, [DEPLOY, STS])
            for c in o["spec"]["template"]["spec"]["containers"]
        }
        assert images == {ref}


CLI_PROFILE = """\
pools:
  - name: cpu-pool
    count: 4
    cpu: "8"
    memory: 32Gi
    nodeSelector: {node.kubernetes.io/instance-type: n2-standard-8}
imagePullSecrets: [cli-secret]
experimentVolume: {kind: hostPath, path: /srv/cli}
"""
OPERATOR_PROFILE = """\
imagePullSecrets: [operator-secret]
experimentVolume: {kind: emptyDir}
experimentMayOverride: [pools, imagePullSecrets, experimentVolume]
allowHostPath: true
"""


def volume_kinds(pod: dict[str, Any]) -> dict[str, Any]:
    """name -> kind of each volume of a pod spec; a hostPath or NFS one with its path."""
    out = {}
    for volume in pod.get("volumes") or []:
        (kind,) = set(volume) - {"name"}
        out[volume["name"]] = (kind, volume[kind].get("path"))
    return out


def pods_of(kube: Any, name: str) -> list[dict[str, Any]]:
    return [p for p in objects_of(kube, name, [POD]) if p["status"].get("phase") == "Running"]


def test_the_clis_profile_reaches_the_pods_through_the_operator_and_kubectl_gets_the_operators(
    kube_cluster: Any, kube_namespace: str, kube: Any, tmp_path: Path
) -> None:
    ns = kube_namespace
    (tmp_path / "cli.yaml").write_text(CLI_PROFILE)
    (tmp_path / "operator.yaml").write_text(OPERATOR_PROFILE)
    with running_operator(kube_cluster, ns, tmp_path, "--profile", str(tmp_path / "operator.yaml")):
        # `surreal-kube create --profile`: the Experiment carries the profile, the operator
        # renders with it (not with its own): volume, pull secrets and pool reach every pod
        name = "exp-cli-profile"
        res = sk(
            kube_cluster, "create", name, "-n", ns, "--profile", str(tmp_path / "cli.yaml"),
            *IMAGE_ARGS, *TINY,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "through the operator" in res.stderr
        cr = kube.get(EXPERIMENT, name)
        assert cr["spec"]["profile"]["imagePullSecrets"] == ["cli-secret"]
        pods = pods_of(kube, name)
        groups = {p["metadata"]["labels"][naming.GROUP_LABEL] for p in pods}
        assert {"learner", "agents", "replay", "tensorplex"} <= groups, groups
        for pod in pods:
            spec = pod["spec"]
            assert spec["imagePullSecrets"] == [{"name": "cli-secret"}], pod["metadata"]["name"]
            assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "n2-standard-8"}
            assert spec["nodeName"].startswith("cpu-pool-")
        learner = next(p for p in pods if p["metadata"]["labels"][naming.GROUP_LABEL] == "learner")
        volume = next(v for v in learner["spec"]["volumes"] if v["name"] == "experiment")
        assert volume["hostPath"]["path"] == f"/srv/cli/{name}"
        # the same objects as the CLI's dry run prints for that spec and profile
        dry = sk(
            kube_cluster, "create", name, "-n", ns, "--profile", str(tmp_path / "cli.yaml"),
            *IMAGE_ARGS, *TINY, "--dry-run",
        )  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        planned = {
            f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(dry.stdout) if o
        }
        live = {
            f"{o['kind']}/{o['metadata']['name']}": o for o in objects_of(kube, name, APPLIED_KINDS)
        }
        assert sorted(live) == sorted(planned)
        for key, obj in planned.items():
            assert live[key]["metadata"]["labels"] == obj["metadata"]["labels"], key
            if obj["kind"] == "ConfigMap" and obj.get("data"):
                assert live[key]["data"] == obj["data"], key  # the spec the roles read
            if obj["kind"] in ("Deployment", "StatefulSet"):
                want, got = obj["spec"]["template"], live[key]["spec"]["template"]
                assert got["metadata"]["annotations"] == want["metadata"]["annotations"], key
                for field in ("nodeSelector", "imagePullSecrets", "tolerations"):
                    assert got["spec"].get(field) == want["spec"].get(field), (key, field)
                # volumes: the same names and kinds (the server adds defaults such as modes),
                # and the CURVE key, mounted at apply only (the printed plan holds no key)
                keyed = {**volume_kinds(want["spec"]), "curve": ("secret", None)}
                assert volume_kinds(got["spec"]) == keyed, key

        # kubectl apply of an Experiment without a profile: the operator's own
        other = "exp-kubectl"
        create_object(kube, other)
        wait_for("Running", lambda: running(kube, other))
        for pod in pods_of(kube, other):
            assert pod["spec"]["imagePullSecrets"] == [{"name": "operator-secret"}]
            assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-pool"}
            volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "experiment")
            assert volume == {"name": "experiment", "emptyDir": {}}
