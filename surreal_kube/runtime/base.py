"""Plumbing every role shares: the stop flag, the metrics client and clean shutdown."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from surreal_kube.comm.metrics import MetricsClient
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.lifecycle import StopFlag

log = logging.getLogger(__name__)

# Roles whose metrics tensorplex bins by index (agents 0-7 in one TensorBoard run).
_INDEXED_GROUPS = {"agents": "agents", "eval": "evals"}


def topology_sources(ctx: RoleContext) -> frozenset[str]:
    """The process names of this role's experiment: the only sources tensorplex and loggerplex
    take (a name becomes a folder or a file, and a stranger could pick any number of them)."""
    from surreal_kube.experiment.topology import build_topology

    return frozenset(p.name for p in build_topology(ctx.experiment, ctx.spec).processes)


class RoleBase:
    """A role's shared state. Subclasses implement `run()` and loop until `self.stop` is set."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        self.ctx = ctx
        self.stop = stop or StopFlag()
        addr = ctx.optional_addr("tensorplex")
        group = _INDEXED_GROUPS.get(ctx.role)
        self.metrics: MetricsClient | None = (
            MetricsClient(addr, ctx.process, group=group, index=ctx.index if group else None)
            if addr
            else None
        )

    def report(
        self, values: Mapping[str, float], step: int | None = None, *, index: int | None = None
    ) -> None:
        """Send scalars to tensorplex (dropped silently if tensorplex is away)."""
        if self.metrics is not None:
            self.metrics.add_scalars(values, step, index=index)

    def run(self) -> None:
        """The role's main loop."""
        raise NotImplementedError

    def close(self) -> None:
        """Release sockets; subclasses extend this."""
        if self.metrics is not None:
            self.metrics.close()
