"""The experiment's CURVE keys on Kubernetes: a Secret mounted read-only into every pod."""

from __future__ import annotations

import base64
import copy
import stat
from pathlib import Path

import kubernetes_validate
import pytest

from surreal_kube.comm import curve
from surreal_kube.launch.keys import key_file_text
from surreal_kube.launch.kube.render import curve as kube_curve
from surreal_kube.launch.kube.render.objects import dump_objects, render_experiment
from tests.launch.kube.specs import IMAGES, MATRIX, experiment

K8S_VERSION = "1.37.0"
OWNER = {
    "apiVersion": "surreal.ai/v1alpha1",
    "kind": "Experiment",
    "name": "exp-matrix",
    "uid": "6c1f1a1e-0000-4000-8000-000000000001",
}


@pytest.mark.parametrize("case", sorted(MATRIX)[:3])
def test_every_pod_mounts_the_secret_and_names_its_path(case: str) -> None:
    exp = experiment(case)
    plain = render_experiment(exp, "rl-test", images=IMAGES, owner=OWNER)
    before = copy.deepcopy(plain)
    text = key_file_text()
    keyed = kube_curve.with_curve_secret(plain, exp.metadata.name, "rl-test", text, owner=OWNER)
    assert plain == before  # the input is left as it was
    secrets = [o for o in keyed if o["kind"] == "Secret"]
    assert len(secrets) == 1 and keyed[1] is secrets[0]
    secret = secrets[0]
    assert secret["metadata"]["name"] == f"{exp.metadata.name}-curve"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == OWNER["uid"]
    assert secret["immutable"] is True
    workloads = [o for o in keyed if o["kind"] in ("Deployment", "StatefulSet")]
    assert workloads
    for obj in keyed:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for w in workloads:
        spec = w["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == kube_curve.VOLUME]
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        assert volume["secret"]["defaultMode"] == 0o400
        for c in spec["containers"]:
            (mount,) = [m for m in c["volumeMounts"] if m["name"] == kube_curve.VOLUME]
            assert mount["readOnly"] is True and mount["mountPath"] == kube_curve.KEYS_DIR
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env[curve.KEYS_PATH_VAR] == kube_curve.KEYS_PATH  # a path, not the key
            assert all(text.strip() not in (v or "") for v in env.values())


def test_the_secret_holds_what_the_roles_read(tmp_path: Path) -> None:
    """What the kubelet writes at KEYS_PATH (the Secret's data, decoded) loads as the keys."""
    text = key_file_text()
    secret = kube_curve.curve_secret("exp", "rl", text)
    mounted = tmp_path / kube_curve.KEY_FILE
    mounted.write_bytes(base64.b64decode(secret["data"][kube_curve.KEY_FILE]))
    mounted.chmod(0o440)  # defaultMode 0400, plus group read for the pod's fsGroup
    assert stat.S_IMODE(mounted.stat().st_mode) == 0o440
    keys = curve.load_key_file(mounted, private=False)
    assert zmq_public(keys) == keys.public
    assert kube_curve.KEYS_PATH_VAR == curve.KEYS_PATH_VAR
    assert kube_curve.KEY_FILE == curve.KEY_FILE


def zmq_public(keys: curve.CurveKeys) -> bytes:
    import zmq

    return zmq.curve_public(keys.secret)


def test_one_key_renders_the_same_bytes() -> None:
    exp = experiment(sorted(MATRIX)[0])
    text = key_file_text()

    def render() -> str:
        objects = render_experiment(exp, "rl", images=IMAGES)
        return dump_objects(kube_curve.with_curve_secret(objects, exp.metadata.name, "rl", text))

    assert render() == render()
