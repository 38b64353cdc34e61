"""The renderer without a cluster: official schemas (strict), determinism, names, wiring, defaults."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from surreal_kube.experiment.resolve import (
    resolve_experiment,
    validate_document,
)
from surreal_kube.experiment.topology import ENDPOINTS
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.naming import RETAIN_ANNOTATION
from surreal_kube.launch.kube.plan import pin_images
from surreal_kube.launch.kube.profile import profile_from_dict
from surreal_kube.launch.kube.render.objects import (
    CONFIG_DIGEST_ANNOTATION,
    RELEASE_ORDER,
    dump_objects,
    port_name,
    render_experiment,
    split_weighted,
)
from surreal_kube.launch.kube.render.ownership import root_of, set_owner
from tests.launch.kube.specs import IMAGES, MATRIX, endpoint_of_variable, experiment

K8S_VERSION = "1.37.0"
OWNER = {
    "apiVersion": "surreal.ai/v1alpha1",
    "kind": "Experiment",
    "name": "exp-matrix",
    "uid": "6c1f1a1e-0000-4000-8000-000000000001",
}
ROOT = Path(__file__).resolve().parents[3]


def release_rank(workload: str) -> int:
    """Where a workload (`<exp>-<group>`) comes in the order tensorplex releases them."""
    return next(i for i, g in enumerate(RELEASE_ORDER) if workload.endswith(f"-{g}"))


def workloads(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]


def containers(objects: list[dict]) -> list[tuple[dict, dict]]:
    return [(w, c) for w in workloads(objects) for c in w["spec"]["template"]["spec"]["containers"]]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


@pytest.mark.parametrize("case", sorted(MATRIX))
@pytest.mark.parametrize("owned", [False, True], ids=["unowned", "owned"])
def test_every_object_validates_strictly(case: str, owned: bool) -> None:
    objects = render_experiment(
        experiment(case), "rl-test", images=IMAGES, owner=OWNER if owned else None
    )
    kinds = Counter(o["kind"] for o in objects)
    # config, progress, results
    assert kinds["ConfigMap"] == 3 and kinds["PersistentVolumeClaim"] == 1
    assert kinds["ServiceAccount"] == kinds["Role"] == kinds["RoleBinding"] == 1
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_rendering_is_byte_identical_across_processes() -> None:
    """Same spec -> same bytes, even with another hash seed (no set or dict-order leaks)."""
    args = ["render", "exp-det", "--num-agents", "8", "--agent-batch", "2"]
    args += ["--set", "replay.shards=3", "--image", f"cpu={IMAGES['cpu']}", "-n", "rl"]
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-m", "surreal_kube.cli.main", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    exp = resolve_experiment(
        "exp-det", sets=["agents.count=8", "agents.batch=2", "replay.shards=3"]
    )
    # the CLI renders from the spec pinned to the images it runs, as `create` and the operator do
    pinned = pin_images(exp, {"cpu": IMAGES["cpu"]})
    again = dump_objects(render_experiment(pinned, "rl", images=IMAGES))
    assert again == outputs[0]


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_only_tensorplex_holds_a_token_and_it_may_write_only_its_progress(case: str) -> None:
    exp = experiment(case)
    name = exp.metadata.name
    objects = render_experiment(exp, "rl", images=IMAGES, owner=OWNER)
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    progress_cm = by_kind[("ConfigMap", naming.progress_name(name))]
    assert "data" not in progress_cm  # re-applying never resets what the reporter wrote
    reporter = naming.reporter_name(name)
    assert by_kind[("ServiceAccount", reporter)]["automountServiceAccountToken"] is False
    workloads_by_kind = {
        plural: sorted(
            w["metadata"]["name"] for w in workloads(objects) if w["kind"].lower() + "s" == plural
        )
        for plural in ("deployments", "statefulsets")
    }
    results_cm = by_kind[("ConfigMap", naming.results_name(name))]
    assert "data" not in results_cm and "binaryData" not in results_cm
    assert by_kind[("Role", reporter)]["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [naming.progress_name(name)],
            "verbs": ["get", "patch"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [naming.results_name(name)],
            "verbs": ["patch"],
        },
    ] + [  # the end of the run: its own workloads to 0, by name, through `scale` only
        {
            "apiGroups": ["apps"],
            "resources": [f"{plural}/scale"],
            "resourceNames": sorted(names, key=release_rank),
            "verbs": ["patch"],
        }
        for plural, names in workloads_by_kind.items()
        if names
    ]
    binding = by_kind[("RoleBinding", reporter)]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": reporter,
    }  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": reporter, "namespace": "rl"}]
    mounting = []
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        has_token = any("projected" in v for v in pod["volumes"])
        assert has_token == (pod.get("serviceAccountName") == reporter)
        for c in pod["containers"]:
            if any(m["name"] == "reporter" for m in c["volumeMounts"]):
                mounting.append(c["name"])
                assert (
                    env_of(c)["SURREAL_PROGRESS_CONFIGMAP"]["value"]
                    == progress_cm["metadata"]["name"]
                )
                assert env_of(c)["SURREAL_RESULTS_CONFIGMAP"]["value"] == naming.results_name(name)
                released = env_of(c)["SURREAL_RELEASE_WORKLOADS"]["value"].split(",")
                assert sorted(released) == sorted(
                    f"{plural}/{n}" for plural, ns in workloads_by_kind.items() for n in ns
                )
                assert released[-1] == f"deployments/{name}-tensorplex"  # itself last
            else:
                assert "SURREAL_REPORTER_DIR" not in env_of(c)
    assert mounting == ["tensorplex"]
    # the objects the pods need exist before the workloads that use them
    kinds = [o["kind"] for o in objects]
    assert kinds.index("RoleBinding") < kinds.index("Deployment")


def test_without_the_reporter_no_pod_gets_an_identity() -> None:
    profile = profile_from_dict({"progressReporter": False})
    objects = render_experiment(experiment("one-agent"), "rl", images=IMAGES, profile=profile)
    kinds = Counter(o["kind"] for o in objects)
    assert kinds["ConfigMap"] == 2 and not kinds["Role"] and not kinds["ServiceAccount"]
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        assert "serviceAccountName" not in pod
        assert not any("projected" in v for v in pod["volumes"])


def test_order_and_root() -> None:
    objects = render_experiment(experiment("one-agent"), "rl", images=IMAGES)
    assert [o["kind"] for o in objects[:2]] == ["ConfigMap", "PersistentVolumeClaim"]
    assert root_of(objects) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "exp-matrix-config",
    }
    assert all("ownerReferences" not in o["metadata"] for o in objects)
    owned = set_owner(objects, {**root_of(objects), "uid": "u-1"})
    assert "ownerReferences" not in owned[0]["metadata"]
    assert "ownerReferences" not in owned[1]["metadata"]  # the claim: data outlives delete
    for obj in owned[2:]:
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "exp-matrix-config",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }


def test_owner_with_uid_owns_everything() -> None:
    objects = render_experiment(experiment("one-agent"), "rl", images=IMAGES, owner=OWNER)
    for obj in objects:
        if obj["kind"] == "PersistentVolumeClaim":  # kept by default: data outlives delete
            assert "ownerReferences" not in obj["metadata"]
            continue
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == OWNER["uid"] and ref["kind"] == "Experiment" and ref["controller"]


def test_retained_volume_is_never_owned() -> None:
    profile = profile_from_dict({"experimentVolume": {"retain": True}})
    objects = render_experiment(
        experiment("one-agent"), "rl", images=IMAGES, owner=OWNER, profile=profile
    )
    (claim,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["annotations"] == {RETAIN_ANNOTATION: "true"}
    assert set_owner([claim], OWNER)[0] == claim


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_names_labels_and_derived_suffixes(case: str) -> None:
    exp = experiment(case)
    topo = exp.topology
    suffixes = {s for s, _ in topo.derived_name_suffixes()}
    objects = render_experiment(exp, "rl", images=IMAGES)
    longest = max(len(s) for s in suffixes)
    for obj in objects:
        name = obj["metadata"]["name"]
        suffix = name.removeprefix("exp-matrix")
        assert suffix in suffixes or len(suffix) < longest, name
        labels = obj["metadata"]["labels"]
        for key in ("name", "instance", "component", "part-of", "managed-by"):
            assert labels[f"app.kubernetes.io/{key}"], (name, key)
        assert labels[naming.EXPERIMENT_LABEL] == "exp-matrix"
    for w in workloads(objects):
        group = topo.group(w["metadata"]["name"].removeprefix("exp-matrix-"))
        assert w["spec"]["replicas"] == group.replicas
        assert w["kind"] == ("StatefulSet" if group.replicated else "Deployment")
        pod_labels = w["spec"]["template"]["metadata"]["labels"]
        assert w["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_user_labels_never_override_ours() -> None:
    exp = resolve_experiment("exp-l")
    labels = {"team": "rl", "app.kubernetes.io/name": "intruder"}
    exp = exp.model_copy(update={"metadata": exp.metadata.model_copy(update={"labels": labels})})
    objects = render_experiment(exp, "rl", images=IMAGES)
    for obj in objects:
        assert obj["metadata"]["labels"]["team"] == "rl"
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "surreal-kube"


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_connect_address_is_a_service_selecting_its_binder(case: str) -> None:
    """Pure half of the wiring check (the cluster test repeats it against EndpointSlices)."""
    exp = experiment(case)
    topo = exp.topology
    objects = render_experiment(exp, "rl", images=IMAGES)
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    pods = {w["metadata"]["name"]: w["spec"]["template"] for w in workloads(objects)}
    checked = 0
    for _, container in containers(objects):
        for var, entry in env_of(container).items():
            if not var.endswith("_ADDR"):
                continue
            endpoint = endpoint_of_variable(var)
            host, port = entry["value"].split("://")[1].rsplit(":", 1)
            process = topo.process(topo.binders[endpoint.name])
            binder = topo.group_of(process)
            if topo.scope(endpoint.name) == "pod":
                assert host == "127.0.0.1"
                continue
            labels = host.split(".")
            if binder.replicated:  # a shard pod: <pod>.<headless service>.<ns>.svc...
                pod, *labels = labels
                assert pod == f"exp-matrix-{binder.name}-{process.index}"
                assert process.index < binder.replicas
            service_name, ns, *_ = labels
            assert (ns, host.endswith(".svc.cluster.local")) == ("rl", True)
            service = services[service_name]
            assert int(port) in [p["port"] for p in service["spec"]["ports"]]
            selector = service["spec"]["selector"].items()
            selected = [n for n, t in pods.items() if selector <= t["metadata"]["labels"].items()]
            assert selected == [f"exp-matrix-{binder.name}"], (var, selected)
            binder_ports = [
                p["containerPort"]
                for c in pods[selected[0]]["spec"]["containers"]
                for p in c.get("ports", [])
            ]
            assert int(port) in binder_ports
            checked += 1
    assert checked > 0


def test_statefulset_index_comes_from_the_pod_ordinal() -> None:
    objects = render_experiment(experiment("eight-agents-batch4-gpu"), "rl", images=IMAGES)
    (agents,) = [o for o in workloads(objects) if o["metadata"]["name"] == "exp-matrix-agents"]
    assert agents["kind"] == "StatefulSet" and agents["spec"]["replicas"] == 2
    assert agents["spec"]["podManagementPolicy"] == "Parallel"
    assert agents["spec"]["serviceName"] == "exp-matrix-agents"
    (container,) = agents["spec"]["template"]["spec"]["containers"]
    names = [e["name"] for e in container["env"]]
    env = env_of(container)
    assert env["SURREAL_INDEX"] == {
        "name": "SURREAL_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}},
    }
    assert env["SURREAL_PROCESS"]["value"] == "agents-$(SURREAL_INDEX)"
    assert names.index("SURREAL_INDEX") < names.index("SURREAL_PROCESS")  # $(VAR) needs order
    assert container["command"] == ["surreal-kube-role", "agents"]
    (headless,) = [
        o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["name"] == "exp-matrix-agents"
    ]
    assert headless["spec"]["clusterIP"] == "None"


def test_shards_as_pods_are_statefulsets_dialled_by_pod_name() -> None:
    """`layout: pods`: each shard a pod of its own, with its own resources, spread over nodes,
    guarded by a disruption budget; its service's backend becomes a cluster endpoint."""
    exp = experiment("shard-pods", extra=["resources.replay-shard.cpu=3"])
    objects = render_experiment(exp, "rl", images=IMAGES)
    by_name = {w["metadata"]["name"]: w for w in workloads(objects)}
    shards = by_name["exp-matrix-replay-shard"]
    assert shards["kind"] == "StatefulSet" and shards["spec"]["replicas"] == 4
    assert shards["spec"]["serviceName"] == "exp-matrix-replay-shard"
    pod = shards["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["requests"]["cpu"] == "3"  # not a share of the replay pod's
    env = env_of(container)
    assert env["SURREAL_PROCESS"]["value"] == "replay-shard-$(SURREAL_INDEX)"
    # one template for every shard: each finds its own collector's bind, all on one port
    for i in range(4):
        assert env[f"SURREAL_REPLAY_COLLECTOR_{i}_BIND"]["value"] == "tcp://0.0.0.0:7100"
    assert env["SURREAL_REPLAY_SAMPLER_BACKEND_ADDR"]["value"] == (
        "tcp://exp-matrix-replay.rl.svc.cluster.local:7013"
    )
    assert [p["containerPort"] for p in container["ports"]] == [7100]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    assert spread["labelSelector"]["matchLabels"] == shards["spec"]["selector"]["matchLabels"]
    # the front pods hold one container each now, the backend on every interface
    (broker,) = by_name["exp-matrix-replay"]["spec"]["template"]["spec"]["containers"]
    assert env_of(broker)["SURREAL_REPLAY_SAMPLER_BACKEND_BIND"]["value"] == "tcp://0.0.0.0:7013"
    (proxy,) = by_name["exp-matrix-ps"]["spec"]["template"]["spec"]["containers"]
    assert env_of(proxy)["SURREAL_PS_BACKEND_BIND"]["value"] == "tcp://0.0.0.0:7021"
    ps_shard = env_of(by_name["exp-matrix-ps-shard"]["spec"]["template"]["spec"]["containers"][0])
    assert ps_shard["SURREAL_PS_BACKEND_ADDR"]["value"] == (
        "tcp://exp-matrix-ps.rl.svc.cluster.local:7021"
    )
    # agents dial every shard at its own pod's name
    agent = env_of(by_name["exp-matrix-agents"]["spec"]["template"]["spec"]["containers"][0])
    for i in range(4):
        assert agent[f"SURREAL_REPLAY_COLLECTOR_{i}_ADDR"]["value"] == (
            f"tcp://exp-matrix-replay-shard-{i}.exp-matrix-replay-shard.rl.svc.cluster.local:7100"
        )
    kinds = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    headless = kinds[("Service", "exp-matrix-replay-shard")]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert [p["port"] for p in headless["ports"]] == [7100]
    budget = kinds[("PodDisruptionBudget", "exp-matrix-replay-shard")]["spec"]
    assert budget["minAvailable"] == 4
    assert kinds[("PodDisruptionBudget", "exp-matrix-ps-shard")]["spec"]["minAvailable"] == 2
    policy = kinds[("NetworkPolicy", "exp-matrix-replay-shard")]["spec"]
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == [7100]
    ps_policy = kinds[("NetworkPolicy", "exp-matrix-replay")]["spec"]
    assert sorted(p["port"] for rule in ps_policy["ingress"] for p in rule["ports"]) == [
        7011,
        7013,
    ]


def test_multi_process_pods_have_one_container_per_process() -> None:
    exp = experiment("ddpg-three-replay-shards")
    objects = render_experiment(exp, "rl", images=IMAGES)
    by_name = {w["metadata"]["name"]: w for w in workloads(objects)}
    replay = by_name["exp-matrix-replay"]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in replay] == [
        "replay",
        "replay-shard-0",
        "replay-shard-1",
        "replay-shard-2",
    ]
    assert [c["command"][1] for c in replay] == ["replay"] + ["replay-shard"] * 3
    assert [env_of(c)["SURREAL_INDEX"]["value"] for c in replay] == ["0", "0", "1", "2"]
    # the pod asks for exactly the component's resources (replay: cpu 1, memory 2Gi), shared by
    # role: a shard that stores and samples weighs three brokers that only route
    assert [c["resources"]["requests"]["cpu"] for c in replay] == ["100m"] + ["300m"] * 3
    assert [c["resources"]["requests"]["memory"] for c in replay] == [
        "205Mi",
        "615Mi",
        "614Mi",
        "614Mi",
    ]
    ps = by_name["exp-matrix-ps"]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in ps] == ["ps", "ps-shard-0", "ps-shard-1"]
    assert [c["resources"]["requests"]["cpu"] for c in ps] == ["50m", "100m", "100m"]


@pytest.mark.parametrize(
    ("total", "weights", "unit", "parts"),
    [
        (1000, [1, 1, 1], 1, [334, 333, 333]),
        (250, [1, 2, 2], 1, [50, 100, 100]),
        (2048 * 2**20, [1, 3, 3, 3], 2**20, [205 * 2**20, 615 * 2**20, 614 * 2**20, 614 * 2**20]),
        (3, [1, 1, 1, 1], 1, [1, 1, 1, 0]),
    ],
)
def test_split_weighted_adds_up_exactly(total: int, weights: list, unit: int, parts: list) -> None:
    assert split_weighted(total, weights, unit) == parts
    assert sum(parts) == total


def test_threads_follow_each_containers_cpu_limit() -> None:
    """Pods got no OMP_NUM_THREADS: torch sized its pools to the node's cores under a 1-2 CPU limit."""
    objects = render_experiment(experiment("ddpg-three-replay-shards"), "rl", images=IMAGES)
    seen = {}
    for _, c in containers(objects):
        env = env_of(c)
        cpu = c["resources"]["limits"]["cpu"]
        millicpu = int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
        expected = str(max(1, millicpu // 1000))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            assert env[var]["value"] == expected, (c["name"], var)
        seen[c["name"]] = expected
    assert seen["learner"] == "2" and seen["replay-shard-0"] == "1"


def pod_digests(objects: list[dict]) -> dict[str, str]:
    return {
        w["metadata"]["name"]: w["spec"]["template"]["metadata"]["annotations"][
            CONFIG_DIGEST_ANNOTATION
        ]
        for w in workloads(objects)
    }


def test_a_spec_edit_rolls_only_the_pods_that_read_it() -> None:
    """A changed spec updated the ConfigMap but rolled no pod: mixed hyper-parameters after restarts."""
    base = experiment("eight-agents-batch4-gpu")
    doc = base.model_dump(by_alias=True, mode="json")

    def edited(path: str, value: Any) -> Any:
        new = copy.deepcopy(doc)
        *parents, last = path.split(".")
        node = new["spec"]
        for key in parents:
            node = node[key]
        node[last] = value
        return validate_document(new)

    before = pod_digests(render_experiment(base, "rl", images=IMAGES))
    evals = pod_digests(render_experiment(edited("evals.mode", "stochastic"), "rl", images=IMAGES))
    assert {k for k in before if before[k] != evals[k]} == {"exp-matrix-evals"}
    # the episodes also set how tensorplex's conductor waits for the final evaluation
    episodes = pod_digests(render_experiment(edited("evals.episodes", 9), "rl", images=IMAGES))
    assert {k for k in before if before[k] != episodes[k]} == {
        "exp-matrix-evals",
        "exp-matrix-tensorplex",
    }
    algo = pod_digests(render_experiment(edited("algorithm.lrPolicy", 0.01), "rl", images=IMAGES))
    assert {k for k in before if before[k] != algo[k]} == {
        "exp-matrix-learner",
        "exp-matrix-agents",
        "exp-matrix-evals",
        "exp-matrix-replay",
    }
    scaled = render_experiment(edited("agents.count", 16), "rl", images=IMAGES)
    assert {k for k, v in pod_digests(scaled).items() if before[k] != v} == {
        "exp-matrix-tensorplex"
    }


def test_security_defaults_and_resources_on_every_container() -> None:
    objects = render_experiment(experiment("eight-agents-batch4-gpu"), "rl", images=IMAGES)
    for w, c in containers(objects):
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        assert pod["automountServiceAccountToken"] is False
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert set(c["resources"]["requests"]) == {"cpu", "memory"}
        assert c["resources"]["limits"]["memory"] == c["resources"]["requests"]["memory"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["config"]["readOnly"] is True and mounts["tmp"]["mountPath"] == "/tmp"
        assert mounts["experiment"]["mountPath"] == env_of(c)["SURREAL_EXPERIMENT_DIR"]["value"]
        assert c["imagePullPolicy"] == "IfNotPresent"


def test_images_follow_gpus() -> None:
    objects = render_experiment(experiment("eight-agents-batch4-gpu"), "rl", images=IMAGES)
    for w, c in containers(objects):
        name = w["metadata"]["name"]
        gpu = name in ("exp-matrix-agents", "exp-matrix-learner")
        assert c["image"] == IMAGES["gpu" if gpu else "cpu"], name
        assert c["resources"]["limits"].get("nvidia.com/gpu", 0) == (1 if gpu else 0)
        tolerations = w["spec"]["template"]["spec"].get("tolerations", [])
        # the pods sharing the GPU learner's node (its ReadWriteOnce volume) tolerate it too
        shares = name.removeprefix("exp-matrix-") in (
            "tensorplex",
            "loggerplex",
            "tensorboard",
            "evals",
        )
        assert bool(tolerations) == (gpu or shares), name


def test_config_map_holds_the_resolved_spec() -> None:
    exp = experiment("one-agent")
    objects = render_experiment(exp, "rl", images=IMAGES)
    text = objects[0]["data"]["experiment.yaml"]
    assert yaml.safe_load(text)["spec"]["agents"]["count"] == 1
    for _, c in containers(objects):
        assert env_of(c)["SURREAL_CONFIG"]["value"] == "/etc/surreal/experiment.yaml"
    dumped = dump_objects(objects)
    assert "experiment.yaml: |\n" in dumped  # a readable block, not an escaped one-liner


def test_volume_kinds() -> None:
    exp = experiment("one-agent")
    nfs = profile_from_dict(
        {"experimentVolume": {"kind": "nfs", "server": "10.0.0.2", "path": "/exports/rl"}}
    )
    objects = render_experiment(exp, "rl", images=IMAGES, profile=nfs)
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    pod = workloads(objects)[0]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "experiment"]
    assert volume == {"name": "experiment", "nfs": {"server": "10.0.0.2", "path": "/exports/rl"}}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "experiment"]
    assert mount["subPath"] == "exp-matrix"
    host = profile_from_dict({"experimentVolume": {"kind": "hostPath", "path": "/data/"}})
    pod = workloads(render_experiment(exp, "rl", images=IMAGES, profile=host))[0]
    (volume,) = [v for v in pod["spec"]["template"]["spec"]["volumes"] if v["name"] == "experiment"]
    assert volume["hostPath"] == {"path": "/data/exp-matrix", "type": "DirectoryOrCreate"}
    claimed = profile_from_dict({"experimentVolume": {"storageClassName": "fast", "size": "50Gi"}})
    objects = render_experiment(exp, "rl", images=IMAGES, profile=claimed)
    (claim,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "50Gi"}},
    }


def test_port_names_fit_the_iana_limit() -> None:
    taken: set[str] = set()
    names = [port_name(e, taken) for e in ENDPOINTS]
    assert all(len(n) <= 15 for n in names)
    assert port_name("replay-collector-12", set()) == "collector-12"
    assert port_name("parameter-publish", set()) == "publish"
    assert port_name("tensorboard", set()) == "tensorboard"


def test_json_output_is_a_list() -> None:
    objects = render_experiment(experiment("one-agent"), "rl", images=IMAGES)
    import json

    doc = json.loads(dump_objects(objects, "json"))
    assert doc["kind"] == "List" and doc["items"] == objects


def test_invalid_namespace_is_refused() -> None:
    from surreal_kube.errors import LaunchError

    with pytest.raises(LaunchError, match="invalid namespace 'RL_team'"):
        render_experiment(experiment("one-agent"), "RL_team", images=IMAGES)


def test_the_autoscaler_may_not_evict_the_learner_or_replay() -> None:
    objects = render_experiment(experiment("eight-agents-batch4-gpu"), "rl", images=IMAGES)
    pinned = {
        w["metadata"]["name"]
        for w in workloads(objects)
        if w["spec"]["template"]["metadata"]["annotations"].get(
            "cluster-autoscaler.kubernetes.io/safe-to-evict"
        )
        == "false"
    }
    assert pinned == {"exp-matrix-learner", "exp-matrix-replay"}


def test_a_gpu_container_knows_its_node_for_the_no_cuda_error() -> None:
    """The learner that holds a GPU and finds no CUDA names the node in its last log line (the
    status shows it); only containers holding a GPU get the variable."""
    exp = resolve_experiment("exp-gpu", sets=["resources.learner.gpu=1"])
    env_of: dict[str, list[dict[str, Any]]] = {}
    for obj in render_experiment(exp, "rl", images=IMAGES):
        if obj["kind"] in ("Deployment", "StatefulSet"):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                env_of[c["name"]] = c.get("env", [])
    node = {"name": "SURREAL_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert node in env_of["learner"]
    assert all(node not in env for name, env in env_of.items() if name != "learner")


def test_every_group_has_an_ingress_boundary_on_the_ports_it_binds() -> None:
    """Issue 25 item 1: ingress to each group's pods only from the experiment's own pods, on the
    ports its Service lists; agents and evals bind nothing and take no ingress at all."""
    exp = resolve_experiment("exp-np", sets=["evals.count=1"])
    objects = render_experiment(exp, "rl", images=IMAGES)
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "NetworkPolicy"}
    services = {
        o["metadata"]["name"]: sorted(p["port"] for p in o["spec"].get("ports", []))
        for o in objects
        if o["kind"] == "Service"
    }
    groups = {g.name for g in exp.topology.groups}
    assert set(policies) == {f"exp-np-{g}" for g in groups}
    for name, policy in policies.items():
        spec = policy["spec"]
        group = name.removeprefix("exp-np-")
        assert spec["podSelector"]["matchLabels"] == naming.selector_labels("exp-np", group)
        assert spec["policyTypes"] == ["Ingress"]
        ports = services.get(name, [])
        if not ports:
            assert spec["ingress"] == [], name
            continue
        (rule,) = spec["ingress"]
        assert rule["from"] == [
            {"podSelector": {"matchLabels": {naming.EXPERIMENT_LABEL: "exp-np"}}}
        ]
        assert sorted(p["port"] for p in rule["ports"]) == ports, name
    assert policies["exp-np-agents"]["spec"]["ingress"] == []
    # applied before any workload: no pod runs open, even for a moment
    from surreal_kube.launch.kube.lifecycle.apply import POD_NEEDS

    assert "NetworkPolicy" in POD_NEEDS
