"""The end-to-end cluster: a control plane whose only node is the real one, as kind gives a user.

Other cluster tests share the kwok pools and keep the real node tainted so nothing lands there by
accident; the user's path needs the opposite: a cluster where `surreal-kube create` with default
settings discovers one schedulable node and every pod really runs on it. So the e2e tests start
their own control plane (no kwok pools) with an untainted real node, build the runtime image from
a snapshot of this checkout and load it into the node's containerd, and stop everything at the end.

The CLI runs as a subprocess (`python -m surreal_kube.cli.main`) with KUBECONFIG pointing at this
cluster and kubectl/helm first on PATH, exactly as a user's shell would have them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import controlplane

ROOT = Path(__file__).resolve().parents[2]
SK = [sys.executable, "-m", "surreal_kube.cli.main"]
ARTIFACTS = ROOT / "build" / "test-artifacts" / "e2e"
"""Where the e2e tests keep what a person may want to look at (TensorBoard's screenshot)."""

MARKS = [
    pytest.mark.e2e,
    pytest.mark.node,
    pytest.mark.cluster,
    pytest.mark.podman,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]
"""Every e2e test needs the real node, the control plane and podman (the image), and takes minutes."""

SMALL_RESOURCES = """\
# The real node has the machine's 2 cores: every role gets a slice that still starts in seconds.
spec:
  resources:
    learner: {cpu: 500m, memory: 2Gi}
    agent: {cpu: 150m, memory: 1Gi}
    eval: {cpu: 150m, memory: 1Gi}
    replay: {cpu: 200m, memory: 1Gi}
    ps: {cpu: 200m, memory: 512Mi}
    tensorplex: {cpu: 150m, memory: 512Mi}
    loggerplex: {cpu: 100m, memory: 512Mi}
    tensorboard: {cpu: 150m, memory: 768Mi}
  session:
    checkpoint: {period: 5, minIntervalSeconds: 5}
"""


@dataclass
class E2ECluster:
    """The running end-to-end cluster and how to drive it like a user."""

    cp: controlplane.ControlPlane
    node: Any
    image: str | None = None

    @property
    def env(self) -> dict[str, str]:
        bin_dir = str(self.cp.bin_dir)
        return {
            **os.environ,
            "KUBECONFIG": str(self.cp.kubeconfig),
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "SURREAL_KUBE_NO_COLOR": "1",
        }

    def sk(
        self, *args: str, timeout: float = 120, check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `surreal-kube ARGS` as a user would against this cluster."""
        done = subprocess.run(
            [*SK, *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd or ROOT,
            timeout=timeout,
        )
        if check:
            assert done.returncode == 0, (
                f"surreal-kube {' '.join(args)} exited {done.returncode}\n"
                f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
            )
        return done

    def kubectl(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        done = subprocess.run(
            [str(Path(self.cp.bin_dir) / "kubectl"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr[-2000:]}"
        return done.stdout

    def status(self, name: str) -> dict[str, Any]:
        return json.loads(self.sk("status", name, "-o", "json", timeout=60).stdout)


@contextmanager
def e2e_cluster() -> Iterator[E2ECluster]:
    """A control plane with no kwok pools and the real node untainted; stopped at the end."""
    from tests.cluster import node

    bin_dir = controlplane.built_bin_dir()
    node_bin = node.built_node_bin_dir()
    if bin_dir is None or node_bin is None:
        raise AssertionError(
            "the control plane's or the real node's binaries are not built: "
            "run `make controlplane node` (tests/cluster/README.md)"
        )
    cp = controlplane.ControlPlane(bin_dir=bin_dir, pools=[])
    cp.start()
    try:
        rn = node.RealNode(cp, bin_dir=node_bin, tainted=False).start()
        try:
            yield E2ECluster(cp=cp, node=rn)
        finally:
            rn.stop()
    finally:
        cp.stop()


def build_and_load(cluster: E2ECluster, engine_url: str, base_image: str, work: Path) -> str:
    """`surreal-kube build --load` of a snapshot of this checkout into the node; the cpu ref."""
    from tests.launch.kube.test_images_podman import project_copy

    project = project_copy(work / "project")
    done = cluster.sk(
        "build",
        "exp-e2e",
        "--engine",
        engine_url,
        "--build-arg",
        f"PYTHON_IMAGE={base_image}",
        "--context-dir",
        str(project),
        "--load",
        "--containerd-address",
        str(cluster.node.containerd_address),
        "--ctr",
        str(cluster.node.ctr),
        timeout=3000,
    )
    from surreal_kube.launch.kube.images import load as image_load

    rows = [line.split("\t") for line in done.stdout.splitlines() if line.count("\t") == 2]
    by_key = {key: (ref, state) for key, ref, state in rows}
    assert by_key.get("cpu", ("", ""))[1] == "loaded", done.stdout + done.stderr
    # the operator's version tag may name an earlier build of this engine ("kept": it never
    # moves); either way the node holds it after --load
    assert by_key.get("operator", ("", ""))[1] in ("loaded", "kept"), rows
    names = cluster.node.image_names()
    for ref, _ in by_key.values():
        assert image_load.normalized(ref) in names, (ref, names)
    return by_key["cpu"][0]


def cluster_snapshot(cluster: E2ECluster) -> str:
    """Every pod (phase, readiness, node), the node's conditions and the last 30 events that
    are not Normal, as text; what cannot be read says why instead."""
    views = (
        ("pods", ["get", "pods", "-A", "-o", "wide"]),
        ("nodes", ["get", "nodes", "-o", "custom-columns=NAME:.metadata.name,"
                   "CONDITIONS:.status.conditions[*].type,STATUS:.status.conditions[*].status"]),
        ("events", ["get", "events", "-A", "--field-selector", "type!=Normal",
                    "--sort-by", ".lastTimestamp"]),
    )  # fmt: skip
    out = []
    for title, args in views:
        try:
            text = cluster.kubectl(*args, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            text = f"cannot read: {exc}\n"
        lines = text.splitlines()
        out.append(f"--- {title}\n" + "\n".join(lines[-30:] if title == "events" else lines))
    out.append("--- disk\n" + disk_report(cluster.node.workdir))
    return "\n".join(out)


def disk_report(path: Path) -> str:
    """Free space where the node keeps its images and pods, and the largest of what the suite
    caches on that disk: the first thing to know when the node reports DiskPressure (its
    kubelet evicts below 512 MiB free, and the scheduler keeps pods off it)."""
    st = os.statvfs(path)
    lines = [
        f"{path}: {st.f_bavail * st.f_frsize / 2**30:.1f} GiB free of "
        f"{st.f_blocks * st.f_frsize / 2**30:.1f} GiB"
    ]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    heavy = [*sorted((cache / "surreal-kube").glob("*")), cache / "go-build"]
    try:
        done = subprocess.run(
            ["du", "-sh", *map(str, (p for p in heavy if p.is_dir()))],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        lines += done.stdout.splitlines()
    except subprocess.TimeoutExpired:
        lines.append("du of the caches took over 60 s")
    return "\n".join(lines)


class RunFailedError(Exception):
    """Raised by a probe that sees the experiment Failed: waiting on is pointless."""


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 2.0) -> Any:
    """probe()'s first truthy value; AssertionError naming `what` (and the last value) after
    timeout. Probes that raise (but RunFailedError) count as not yet (the API server may be busy, a port-forward not
    listening yet)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (AssertionError, OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            last = e
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def keep_artifact(path: Path, name: str) -> Path:
    """Copy a file into ARTIFACTS (kept after the test) and return where."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    dest = ARTIFACTS / name
    shutil.copy(path, dest)
    return dest


def chromium() -> str | None:
    """Debian's chromium, if installed (Makefile DEB_PACKAGES)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(url: str, out: Path, size: Sequence[int] = (1400, 1000)) -> None:
    """A headless Chromium screenshot of url into out (PNG); waits for the page's scripts."""
    browser = chromium()
    assert browser, "chromium is not installed: run `make deb`"
    with_profile = out.parent / "chromium-profile"
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={with_profile}",
            "--hide-scrollbars",
            f"--window-size={size[0]},{size[1]}",
            "--virtual-time-budget=15000",
            f"--screenshot={out}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]
    shutil.rmtree(with_profile, ignore_errors=True)
