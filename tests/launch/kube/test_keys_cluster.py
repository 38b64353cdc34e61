"""The experiment's CURVE key on the test control plane (lifecycle/keys.py): made once at create,
mounted into every pod, kept by a scale; render and dry-run print no key."""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any

import pytest

from surreal_kube.launch.keys import KEY_FILE
from surreal_kube.launch.kube.api.client import Kube, resource
from surreal_kube.launch.kube.render import curve as kube_curve
from tests.operator.support import IMAGE_ARGS, TINY, profile_file, sk

pytestmark = pytest.mark.cluster

SECRET = resource("v1", "Secret")
WORKLOADS = [resource("apps/v1", "Deployment"), resource("apps/v1", "StatefulSet")]


def key_of(kube: Kube, name: str) -> str:
    secret = kube.get(SECRET, kube_curve.secret_name(name))
    assert secret["immutable"] is True
    return base64.b64decode(secret["data"][KEY_FILE]).decode()


def test_a_direct_experiment_gets_one_key_that_a_scale_keeps(
    kube_cluster: Any, kube_namespace: str, tmp_path: Any
) -> None:
    profile = str(profile_file(tmp_path))
    common = ["-n", kube_namespace, "--profile", profile]
    res = sk(
        kube_cluster, "create", "exp-keys", *common, "--direct", "--no-wait",
        *IMAGE_ARGS, *TINY, "--num-agents", "2",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    with Kube(kubeconfig=kube_cluster.kubeconfig, namespace=kube_namespace) as kube:
        key = key_of(kube, "exp-keys")
        assert '"secret"' in key
        workloads = [w for res_ in WORKLOADS for w in kube.list(res_, kube_namespace)]
        assert workloads
        for w in workloads:
            spec = w["spec"]["template"]["spec"]
            assert any(v.get("secret", {}).get("secretName") == "exp-keys-curve"
                       for v in spec["volumes"])  # fmt: skip
        res = sk(kube_cluster, "scale", "exp-keys", *common, "--agents", "3")
        assert res.returncode == 0, res.stderr
        assert key_of(kube, "exp-keys") == key  # the running pods' key, not a new one
        agents = kube.get(WORKLOADS[1], "exp-keys-agents")
        assert agents["spec"]["replicas"] == 3
        mounts = agents["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        assert any(m["name"] == kube_curve.VOLUME for m in mounts)  # a scale keeps the mount
    # what is printed holds no key (and needs no cluster)
    printed = subprocess.run(
        [sys.executable, "-m", "surreal_kube.cli.main", "render", "exp-keys", *IMAGE_ARGS],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    assert "kind: Secret" not in printed.stdout and key.split('"')[3] not in printed.stdout
