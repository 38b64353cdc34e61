"""Running the pinned helm binary (built with the test control plane) in the chart tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "surreal-kube"


def helm_binary() -> Path:
    from tests.cluster import controlplane

    bin_dir = controlplane.built_bin_dir()
    if bin_dir is not None and (bin_dir / "helm").exists():
        return bin_dir / "helm"
    found = shutil.which("helm")
    if found:
        return Path(found)
    pytest.skip("helm is not built: run `make controlplane` (tests/cluster/build.sh builds it)")


def helm(
    *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def template(
    *args: str,
    namespace: str = "surreal-kube-system",
    release: str = "surreal-kube",
    tests: bool = False,
) -> list[dict[str, Any]]:
    """The chart's objects as `helm install` creates them; with `tests`, also `helm test`'s."""
    skip = () if tests else ("--skip-tests",)
    out = helm("template", release, str(CHART), "--namespace", namespace, *skip, *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]
