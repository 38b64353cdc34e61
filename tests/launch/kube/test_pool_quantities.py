"""Discovered pools read every allocatable figure as a Kubernetes quantity (quantity.py), as the
API server writes it: `1k` pods is a thousand, not a crash."""

from __future__ import annotations

from surreal_kube.launch.kube.profile import pools_from_nodes


def test_every_allocatable_figure_is_read_as_a_quantity() -> None:
    node = {
        "name": "n-0",
        "labels": {"cloud.google.com/gke-nodepool": "big"},
        "allocatable": {"cpu": "7910m", "memory": "30Gi", "nvidia.com/gpu": "4", "pods": "1k"},
    }
    (pool,) = pools_from_nodes([node])
    assert (pool.name, pool.millicpu, pool.memory_bytes) == ("big", 7910, 30 * 2**30)
    assert (pool.gpus, pool.pods) == (4, 1000)
