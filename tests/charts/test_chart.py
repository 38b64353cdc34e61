"""The Helm chart: lint, template, documented values, RBAC equal to the operator's own rules."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from surreal_kube.launch.kube.profile import ClusterProfile, profile_from_dict
from surreal_kube.launch.kube.render import crd
from surreal_kube.launch.kube.render.custom_resource import resolve_object
from surreal_kube.operator import rbac
from surreal_kube.operator.main import parse
from tests.charts.helm import CHART, ROOT, by_kind, helm, template


def test_lint_is_clean() -> None:
    done = helm("lint", str(CHART), "--strict")
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout


def test_default_install_objects() -> None:
    docs = template()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    (deploy,) = by_kind(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (
        container["image"] == "surreal-kube/runtime-cpu:0.1.0"
    )  # pinned: appVersion, the image `build` tags
    assert container["command"] == ["surreal-kube-operator"]
    assert "--namespace=surreal-kube-system" in container["args"]
    # what `config -o yaml | kubectl apply` sends names a build: it runs on the operator's image
    assert "--default-image=cpu=surreal-kube/runtime-cpu:0.1.0" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--default-image=gpu=")]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["serviceAccountName"] == "surreal-kube"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # Prometheus metrics: the operator serves them, a Service fronts them
    assert "--metrics=0.0.0.0:8081" in container["args"]
    (service,) = by_kind(docs, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8081, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert "app.kubernetes.io/version" not in selector and "helm.sh/chart" not in selector
    bindings = {b["metadata"]["name"]: b for b in by_kind(docs, "RoleBinding")}
    binding = bindings["surreal-kube"]
    assert binding["metadata"]["namespace"] == "surreal-kube-system"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "surreal-kube",
    }


def test_rbac_is_the_operators_own_rules() -> None:
    docs = template()
    roles = {r["metadata"]["name"]: r["rules"] for r in by_kind(docs, "ClusterRole")}
    assert roles["surreal-kube"] == rbac.RULES
    assert roles["surreal-kube-nodes"] == rbac.NODE_RULES
    (lease_role,) = by_kind(docs, "Role")  # the leader election's, in its own namespace only
    assert lease_role["rules"] == rbac.LEASE_RULES
    assert lease_role["metadata"]["namespace"] == "surreal-kube-system"
    no_nodes = template("--set", "rbac.readNodes=false")
    assert [r["metadata"]["name"] for r in by_kind(no_nodes, "ClusterRole")] == ["surreal-kube"]
    (deploy,) = by_kind(no_nodes, "Deployment")
    assert "--no-read-nodes" in deploy["spec"]["template"]["spec"]["containers"][0]["args"]


def test_watched_namespaces_get_a_rolebinding_each() -> None:
    docs = template("--set", "watchNamespaces={team-a,team-b}")
    watched = [b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["kind"] == "ClusterRole"]
    assert sorted(b["metadata"]["namespace"] for b in watched) == ["team-a", "team-b"]
    args = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--namespace=team-a", "--namespace=team-b"]
    wide = template("--set", "clusterWide=true")
    assert [b["roleRef"]["kind"] for b in by_kind(wide, "RoleBinding")] == ["Role"]  # the Lease
    assert {b["metadata"]["name"] for b in by_kind(wide, "ClusterRoleBinding")} == {
        "surreal-kube",
        "surreal-kube-nodes",
    }
    args = by_kind(wide, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" in args


def test_create_switches_and_names() -> None:
    none = template(
        "--set",
        "rbac.create=false",
        "--set",
        "serviceAccount.create=false",
        "--set",
        "serviceAccount.name=existing",
    )
    assert sorted(d["kind"] for d in none) == ["ConfigMap", "Deployment", "Service"]

    (deploy,) = by_kind(none, "Deployment")
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "existing"
    refused = helm("template", "x", str(CHART), "--set", "serviceAccount.create=false", check=False)
    assert refused.returncode != 0
    assert "serviceAccount.name is required when serviceAccount.create is false" in refused.stderr
    long = template(release="a-release-name-of-fifty-three-characters-helms-limit1")
    for doc in long:
        assert len(doc["metadata"]["name"]) <= 63 and not doc["metadata"]["name"].endswith("-")
    digest = "sha256:" + "ab" * 32
    pinned = template("--set", f"image.digest={digest}")
    image = by_kind(pinned, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"surreal-kube/runtime-cpu@{digest}"


def operator_profile(docs: list[dict]) -> tuple[ClusterProfile, dict, dict]:
    """The profile the operator pod reads (its ConfigMap, as mounted), its container, its pod."""
    (deploy,) = by_kind(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    path = next(a for a in container["args"] if a.startswith("--profile=")).split("=", 1)[1]
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    (cm,) = [
        d
        for d in by_kind(docs, "ConfigMap")
        if d["metadata"]["name"] == volume["configMap"]["name"]
    ]
    text = cm["data"][path[len(mount["mountPath"]) + 1 :]]
    return profile_from_dict(yaml.safe_load(text), "the chart's profile"), container, deploy


def test_the_chart_sets_the_operators_profile() -> None:
    default, _, deploy = operator_profile(template())
    assert default == ClusterProfile()  # empty: the built-in defaults, pools from the nodes
    values = {
        "experimentVolume": {"kind": "persistentVolumeClaim", "storageClassName": "standard-rwo"},
        "imagePullSecrets": ["regcred"],
        "pools": [{"name": "cpu-pool", "count": 3, "cpu": "8", "memory": "32Gi"}],
        "registry": "registry.test/surreal",
    }
    docs = template("--set-json", f"profile={json.dumps(values)}")
    chosen, container, changed = operator_profile(docs)
    assert chosen == profile_from_dict(values)
    assert chosen.experiment_volume.storage_class_name == "standard-rwo"
    assert chosen.image_pull_secrets == ["regcred"] and chosen.pools[0].name == "cpu-pool"
    # the operator reads it at start: a changed profile changes the pod template (a rollout)
    key = "checksum/profile"
    before = deploy["spec"]["template"]["metadata"]["annotations"][key]
    assert changed["spec"]["template"]["metadata"]["annotations"][key] != before
    # and the operator accepts exactly what the chart rendered
    assert parse(container["args"]).profile == "/etc/surreal-kube/profile.yaml"


def test_the_profile_values_are_the_profiles_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    keys = set(schema["properties"]["profile"]["properties"])
    assert keys == {f.alias or n for n, f in ClusterProfile.model_fields.items()}
    done = helm("template", "x", str(CHART), "--set", "profile.storageClass=x", check=False)
    assert done.returncode != 0 and "storageClass" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("image.tag=latest", "/image/tag"),
        ("watchNamespaces={Bad_NS}", "watchNamespaces"),
        ("operator.learnerMaxRestarts=-1", "learnerMaxRestarts"),
        ("unknownValue=1", "unknownValue"),
    ],
)
def test_schema_refuses_bad_values(flag: str, message: str) -> None:
    done = helm("template", "x", str(CHART), "--set", flag, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_experiments_from_values_are_experiment_objects() -> None:
    values = {
        "experiments": {
            "exp-helm": {
                "agents": {"count": 4},
                "images": {"cpu": {"image": "registry.test/runtime:1"}},
            },
            "exp-ddpg": {"algorithm": {"name": "ddpg"}},
        }
    }
    docs = template("--set-json", f"experiments={json.dumps(values['experiments'])}")
    exps = {d["metadata"]["name"]: d for d in by_kind(docs, "Experiment")}
    assert set(exps) == {"exp-helm", "exp-ddpg"}
    assert exps["exp-helm"]["metadata"]["namespace"] == "surreal-kube-system"
    assert resolve_object(exps["exp-helm"]).spec.agents.count == 4
    assert resolve_object(exps["exp-ddpg"]).spec.replay.kind == "uniform"


def test_crd_ships_with_the_chart() -> None:
    docs = template("--include-crds")
    (definition,) = by_kind(docs, "CustomResourceDefinition")
    assert definition == crd.experiment_crd()


def test_operators_manifests_are_the_chart_rendered() -> None:
    text = (ROOT / "operators" / "operator.yaml").read_text()
    body = text[text.index("---") :]
    rendered = helm(
        "template", "surreal-kube", str(CHART), "--namespace", "surreal-kube-system", "--skip-tests"
    ).stdout
    assert body == rendered, "regenerate operators/operator.yaml (see its header)"


def test_every_value_is_documented() -> None:
    """Each value has a comment starting with its dotted name, or all its children do."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented: set[str] = set()
    keys: list[str] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        match = re.match(r"^(\s*)([A-Za-z][A-Za-z0-9]*):", line)
        if not match:
            if not stripped:
                comment = []
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        keys.append(path)
        if any(c.startswith(f"# {path} --") for c in comment):
            documented.add(path)
        comment = []
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def ok(path: str) -> bool:
        if path in documented:
            return True
        children = [
            k for k in keys if k.startswith(path + ".") and k.count(".") == path.count(".") + 1
        ]
        return bool(children) and all(ok(c) for c in children)

    undocumented = [k for k in keys if "." not in k and not ok(k)]
    assert not undocumented, f"values without a '# <name> --' comment: {undocumented}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) == set(schema["properties"])
    for key in keys:
        assert re.fullmatch(r"[a-z][A-Za-z0-9.]*", key), f"{key}: values are lowerCamelCase"


# The Kubernetes release from which CRD validation rules may call each CEL function library
# this CRD uses (https://kubernetes.io/docs/reference/using-api/cel/, "Kubernetes quantity
# library": usable in CRD rules from 1.29). A rule that calls a later function must raise this
# table and the chart's kubeVersion together.
CEL_FUNCTION_SINCE = {"isQuantity(": (1, 29), "quantity(": (1, 29), "isGreaterThan(": (1, 29)}


def test_the_charts_kubeversion_is_the_crds_cel_floor() -> None:
    """A 1.28 cluster accepts the chart (kubeVersion) and then refuses its CRD, whose rules call
    the quantity library: the chart's floor must be the newest library the rules use."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    floor = re.fullmatch(r">=(\d+)\.(\d+)\.0-0", chart["kubeVersion"])
    assert floor, chart["kubeVersion"]
    rules = [
        v["rule"]
        for doc in yaml.safe_load_all((CHART / "crds" / "experiments.surreal.ai.yaml").read_text())
        for v in _validations(doc)
    ]
    assert rules, "the CRD has validation rules"
    needed = max(
        (since for rule in rules for fn, since in CEL_FUNCTION_SINCE.items() if fn in rule),
        default=(1, 0),
    )
    assert (int(floor[1]), int(floor[2])) == needed


def _validations(node: object) -> list[dict[str, str]]:
    if isinstance(node, dict):
        found = list(node.get("x-kubernetes-validations", []))
        for value in node.values():
            found += _validations(value)
        return found
    if isinstance(node, list):
        return [v for item in node for v in _validations(item)]
    return []


def test_metrics_can_be_off_or_scraped_by_a_service_monitor() -> None:
    off = template("--set", "metrics.enabled=false")
    assert not by_kind(off, "Service")
    args = by_kind(off, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--metrics")]
    monitored = template(
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.labels.release=prom",
    )
    (monitor,) = by_kind(monitored, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]


def test_two_replicas_elect_a_leader() -> None:
    (deploy,) = by_kind(template(), "Deployment")
    assert deploy["spec"]["replicas"] == 2
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert "--leader-elect" in container["args"]
    env = {
        e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        for e in container["env"]
    }
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"


def _test_hooks(*args: str) -> list[dict]:
    return [
        d
        for d in template(*args, tests=True)
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
    ]


def test_helm_test_runs_a_tiny_experiment_with_rights_to_experiments_only() -> None:
    from surreal_kube.operator import smoke

    hooks = _test_hooks()
    assert sorted(d["kind"] for d in hooks) == ["Pod", "Role", "RoleBinding", "ServiceAccount"]
    for doc in hooks:
        assert doc["metadata"]["namespace"] == "surreal-kube-system"
        assert doc["metadata"]["labels"]["app.kubernetes.io/component"] == "helm-test"
        # passed or failed, the test leaves nothing (Helm deletes the RBAC hooks that
        # succeeded when a later hook fails); its log is printed first
        policy = doc["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
        assert {"before-hook-creation", "hook-succeeded"} <= set(policy)
        if doc["kind"] == "Pod":
            assert "hook-failed" in policy
            logs = doc["metadata"]["annotations"]["helm.sh/hook-output-log-policy"]
            assert set(logs.split(",")) == {"hook-succeeded", "hook-failed"}
    (role,) = by_kind(hooks, "Role")
    assert role["rules"] == [
        {"apiGroups": ["surreal.ai"], "resources": ["experiments"],
         "verbs": ["get", "create", "delete"]}
    ]  # fmt: skip
    (pod,) = by_kind(hooks, "Pod")
    assert pod["spec"]["serviceAccountName"] == role["metadata"]["name"]
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    # the operator's image: what experiments of `config -o yaml` run on by default
    (deploy,) = by_kind(template(), "Deployment")
    assert container["image"] == deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["python", "-m", "surreal_kube.operator.smoke"]
    # the metrics Service selects the operator's pods, never the test's
    (service,) = by_kind(template(), "Service")
    labels = pod["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    # the arguments the chart renders are ones the smoke accepts, and make a valid Experiment
    args = smoke.parse(container["args"])
    obj = smoke.smoke_object(
        args.name, args.namespace, release=args.release, env=args.env,
        max_env_steps=args.max_env_steps, num_evals=args.num_evals,
        resources=smoke.parse_resources(args.resources),
    )  # fmt: skip
    assert obj["metadata"]["name"] == "surreal-kube-smoke"
    assert obj["metadata"]["labels"] == {smoke.TEST_LABEL: "surreal-kube"}
    assert obj["spec"]["resources"]["learner"]["cpu"] == "500m"
    assert obj["spec"]["session"]["maxEnvSteps"] == 10_000
    resolve_object(obj)  # what the operator does with it


def test_helm_test_follows_the_watched_namespace_and_can_be_off() -> None:
    hooks = _test_hooks("--set", "watchNamespaces={team-a,team-b}", "--set", "helmTest.name=t1")
    assert {d["metadata"]["namespace"] for d in hooks} == {"team-a"}
    (pod,) = by_kind(hooks, "Pod")
    assert "--name=t1" in pod["spec"]["containers"][0]["args"]
    assert not _test_hooks("--set", "helmTest.enabled=false")


@pytest.mark.parametrize(
    "flag",
    ["helmTest.maxEnvSteps=0", "helmTest.name=Bad_Name", "helmTest.resources.learner.cpus=1"],
)
def test_helm_test_values_are_checked(flag: str) -> None:
    done = helm("template", "x", str(CHART), "--set", flag, check=False)
    assert done.returncode != 0 and "helmTest" in done.stderr, done.stderr
