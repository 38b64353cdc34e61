"""Which cluster and namespace a verb talks to, as kubectl users say it (kubeconfig, context,
namespace): kept apart from the client so that a verb can carry it before connecting."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from surreal_kube.launch.kube.api.client import (
    Kube,
)


@dataclass(frozen=True)
class Target:
    """Which cluster and namespace, as kubectl users say it."""

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None

    def connect(self) -> Kube:
        return Kube(kubeconfig=self.kubeconfig, context=self.context, namespace=self.namespace)
