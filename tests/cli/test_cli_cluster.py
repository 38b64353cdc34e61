"""Issue 15 against the test control plane: the one rule, -o and dry runs on a real API server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.test_first_day import fake_local_experiment
from tests.operator.support import IMAGE_ARGS, ROOT, TINY, profile_file

pytestmark = pytest.mark.cluster


def sk(cluster: Any, *args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **cluster.env(), "SURREAL_KUBE_ROOT": str(root)}
    env.pop("SURREAL_KUBE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "surreal_kube.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=ROOT,
    )


def test_a_miss_on_the_cluster_says_where_and_points_to_the_local_twin(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    root = tmp_path / "exps"
    fake_local_experiment(root, "exp-twin")
    res = sk(kube_cluster, "status", "exp-twin", "-n", kube_namespace, root=root)
    assert res.returncode == 1
    assert res.stderr.strip() == (
        f"error: no experiment named 'exp-twin' in namespace '{kube_namespace}' "
        f"(context surreal-kube-test); a local experiment 'exp-twin' exists under {root}: "
        "add --local"
    )
    res = sk(kube_cluster, "list", "-n", kube_namespace, "-o", "name", root=root)
    assert res.returncode == 0 and res.stdout == ""


def test_server_dry_run_as_kubectl_users_type_it(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    args = ["create", "exp-dry", "-n", kube_namespace, "--direct", "--dry-run=server",
            "--profile", str(profile_file(tmp_path)), *IMAGE_ARGS, *TINY]  # fmt: skip
    res = sk(kube_cluster, *args, root=tmp_path / "exps")
    assert res.returncode == 0, res.stderr
    assert "the API server accepted" in res.stderr and "nothing stored" in res.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(res.stdout)]
    assert kinds[0] == "ConfigMap" and "StatefulSet" in kinds
    res = sk(kube_cluster, "list", "-n", kube_namespace, "-o", "name", root=tmp_path / "exps")
    assert res.returncode == 0 and res.stdout == ""  # nothing was stored
