"""pytest plugin: the test Kubernetes control plane as fixtures.

`kube_cluster` (session scope) yields a KubeCluster: it reuses the cluster that `make cluster-up`
started when its state file says it is alive (and it has the default node pools), and otherwise
starts a private one for the session and stops it at the end. `kube_namespace` yields a fresh namespace (uuid-suffixed) per test and
deletes it afterwards.

Registered by tests/conftest.py (pytest_plugins = ["tests.cluster.fixtures"]). Tests that use
these fixtures are marked `@pytest.mark.cluster`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import controlplane


class KubeCluster:
    """A running control plane, as the tests see it."""

    def __init__(self, cp: controlplane.ControlPlane, owned: bool) -> None:
        self.control_plane = cp
        self.owned = owned
        """True if this session started it (and stops it at the end)."""

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    @property
    def bin_dir(self) -> Path:
        return self.control_plane.bin_dir

    @property
    def helm(self) -> Path:
        return self.control_plane.helm

    @property
    def kubectl(self) -> Path:
        return self.control_plane.kubectl

    @property
    def server(self) -> str:
        return self.control_plane.server

    @property
    def pools(self) -> list[controlplane.NodePool]:
        return self.control_plane.pools

    def api_client(self) -> Any:
        """A new kubernetes.client.ApiClient for the cluster (use it as a context manager)."""
        return self.control_plane.api_client()

    def env(self) -> dict[str, str]:
        """KUBECONFIG and a PATH with kubectl and helm first, for subprocesses."""
        return self.control_plane.env()

    def create_namespace(self, prefix: str = "test", timeout: float = 30.0) -> str:
        """Create <prefix>-<uuid8> and wait for its default ServiceAccount (pods need it)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
            deadline = time.monotonic() + timeout
            while True:
                try:
                    core.read_namespaced_service_account("default", name)
                    return name
                except ApiException as e:
                    if e.status != 404 or time.monotonic() > deadline:
                        raise
                time.sleep(0.1)

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace without waiting (the namespace controller finishes the job)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.api_client() as api:
            try:
                client.CoreV1Api(api).delete_namespace(name)
            except ApiException as e:
                if e.status != 404:
                    raise


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """The test control plane: the `make cluster-up` one if alive, else a private one."""
    bin_dir = controlplane.built_bin_dir()
    if bin_dir is None:
        # A cold build takes tens of minutes, longer than a test may: `make test` builds first.
        pytest.fail(
            "the control-plane binaries are not built: run `make controlplane` "
            "(tests/cluster/README.md)",
            pytrace=False,
        )
    shared = controlplane.load_shared()
    # Reuse it only with the default node pools (the tests expect them) and the current pins.
    if (
        shared is not None
        and shared.pools == controlplane.load_pools(None)
        and shared.bin_dir == bin_dir
    ):
        yield KubeCluster(shared, owned=False)
        return
    cp = controlplane.ControlPlane(bin_dir=bin_dir)
    cp.start()
    try:
        yield KubeCluster(cp, owned=True)
    finally:
        cp.stop()


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards."""
    slug = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())
    prefix = "t-" + slug[:40].strip("-")
    name = kube_cluster.create_namespace(prefix)
    yield name
    kube_cluster.delete_namespace(name)


@pytest.fixture(scope="session")
def real_node(kube_cluster: KubeCluster) -> Iterator[Any]:
    """The real node (tests/cluster/node.py RealNode) joined to the session's control plane:
    the `make cluster-up` cluster's own when it has one, else one started for the session and
    torn down at its end. Tests that use it are marked `@pytest.mark.node`."""
    from tests.cluster import node

    cp = kube_cluster.control_plane
    shared = None if kube_cluster.owned else controlplane.load_shared_node(cp)
    if shared is not None:
        yield shared
        return
    bin_dir = node.built_node_bin_dir()
    if bin_dir is None:
        pytest.fail(
            "the real node's binaries are not built: run `make node` (tests/cluster/README.md)",
            pytrace=False,
        )
    missing = node.missing_host_tools()
    if missing:
        pytest.fail(
            f"the real node needs Debian packages {' '.join(missing)}: run `make deb`",
            pytrace=False,
        )
    rn = node.RealNode(cp, bin_dir=bin_dir)
    rn.start()
    try:
        yield rn
    finally:
        rn.stop()


# ------------------------------------------------------------- add-ons (tests/cluster/addons.py)


class AutoscaledCluster(KubeCluster):
    """A private control plane whose node pools the autoscaler grows from 0 (`.autoscaler`)."""

    def __init__(self, cp: controlplane.ControlPlane, autoscaler: Any) -> None:
        super().__init__(cp, owned=True)
        self.autoscaler = autoscaler


class KueueCluster(KubeCluster):
    """A private control plane with the default pools and Kueue (`.kueue`)."""

    def __init__(self, cp: controlplane.ControlPlane, kueue: Any) -> None:
        super().__init__(cp, owned=True)
        self.kueue = kueue


def _private_control_plane(addon: str, pools: Any = None) -> tuple[controlplane.ControlPlane, Any]:
    """A private control plane (not started) and the add-on's bin directory, or a test
    failure saying what to build: both builds outlast a test."""
    from tests.cluster import addons

    bin_dir = controlplane.built_bin_dir()
    if bin_dir is None:
        pytest.fail("the control-plane binaries are not built: run `make controlplane`", False)
    addon_dir = addons.addon_bin_dir(addon)
    if addon_dir is None:
        pytest.fail(f"the {addon} add-on is not built: run `make cluster-addons`", False)
    return controlplane.ControlPlane(bin_dir=bin_dir, pools=pools), addon_dir


@pytest.fixture(scope="session")
def autoscaled_cluster() -> Iterator[AutoscaledCluster]:
    """A private control plane with no static node: Karpenter's kwok provider grows the
    GKE-shaped cpu-pool and gpu-pool (addons.DEFAULT_SCALED_POOLS) from 0 for pending pods and
    removes empty nodes 5 s after they empty. Private because an autoscaler acts on every
    pending pod of its cluster, and other tests leave pods pending on purpose."""
    from tests.cluster import addons

    cp, addon_dir = _private_control_plane("karpenter", pools=[])
    cp.start()
    try:
        autoscaler = addons.Autoscaler(cp, bin_dir=addon_dir).start()
        try:
            yield AutoscaledCluster(cp, autoscaler)
        finally:
            autoscaler.stop()
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kueue_cluster() -> Iterator[KueueCluster]:
    """A private control plane (default pools) with Kueue and a ClusterQueue of 32 CPU,
    128Gi and 4 GPUs on gpu-pool (one GPU node's worth), 32 CPU / 128Gi on cpu-pool. Private so
    that Kueue's CRDs and queues never reach the shared cluster."""
    from tests.cluster import addons

    cp, addon_dir = _private_control_plane("kueue")
    cp.start()
    try:
        kueue = addons.Kueue(cp, quota=addons.Quota(gpus=4), bin_dir=addon_dir).start()
        try:
            yield KueueCluster(cp, kueue)
        finally:
            kueue.stop()
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def policy_engine(real_node: Any) -> Iterator[Any]:
    """kube-router's NetworkPolicy firewall (tests/cluster/netpol.py) on the session's real
    node, stopped (its chains and ipsets removed) at the end. `.node` is the RealNode."""
    from tests.cluster import addons, netpol

    addon_dir = addons.addon_bin_dir("kube-router")
    if addon_dir is None:
        pytest.fail("the kube-router add-on is not built: run `make cluster-addons`", False)
    engine = netpol.PolicyEngine(real_node, bin_dir=addon_dir).start()
    try:
        yield engine
    finally:
        engine.stop()
