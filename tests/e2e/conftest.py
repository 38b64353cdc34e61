"""Fixtures of the end-to-end tests (tests/e2e/support.py says why they have a cluster of their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.support import E2ECluster, build_and_load, cluster_snapshot, e2e_cluster
from tests.launch.kube.engine import BASE_IMAGE, Engine, missing_tools, podman_engine


@pytest.fixture(scope="session")
def e2e_engine() -> Iterator[Engine]:
    missing = missing_tools()
    if missing:
        pytest.fail(f"needs {', '.join(missing)}: run `make deb`", pytrace=False)
    with podman_engine() as eng:
        yield eng


@pytest.fixture(scope="session")
def e2e(e2e_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    """The end-to-end cluster with this checkout's runtime image loaded into its node."""
    with e2e_cluster() as cluster:
        cluster.image = build_and_load(
            cluster, e2e_engine.url, BASE_IMAGE, tmp_path_factory.mktemp("e2e-image")
        )
        yield cluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed e2e test's report carries what the cluster looked like then (its pods, the
    node's conditions, the last warnings): CI gives no other view of a cluster that is gone."""
    report = yield
    cluster = getattr(item, "funcargs", {}).get("e2e")
    if report.when == "call" and report.failed and isinstance(cluster, E2ECluster):
        report.sections.append(("cluster at the failure", cluster_snapshot(cluster)))
    return report
