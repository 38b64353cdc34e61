"""Fixtures of the Kubernetes backend's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from surreal_kube.launch.kube.api.client import Kube


@pytest.fixture
def kube(kube_cluster: Any, kube_namespace: str) -> Iterator[Kube]:
    """A client of the shared test cluster, in this test's namespace."""
    with Kube(kubeconfig=kube_cluster.kubeconfig, namespace=kube_namespace) as client:
        yield client
