"""The parameter server: a proxy (role `ps`) in front of N shards (role `ps-shard`).

    agents/evals --ps-serve--> [ps: ROUTER->DEALER forwarder] --ps-backend--> ps-shard-i (REP)
    learner --parameter-publish (PUB)--> ps-shard-i (SUB)

With the experiment's keys, fetches and answers are sealed between the agent and the shard
(`comm.seal`): the proxy forwards them unopened, and each shard seals a publication once for
every agent that fetches it.

Each shard holds the newest parameters; the proxy spreads fetches round-robin over the shards, so
adding shards adds fetch capacity for large agent fleets.
"""

from __future__ import annotations

import logging

from surreal_kube.comm.parameters import ParameterShard, parameter_proxy
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.layout import parameter_bytes
from surreal_kube.runtime.lifecycle import Every, RateMeter, StopFlag

log = logging.getLogger(__name__)


class ParameterProxy(RoleBase):
    """Role `ps`: forwards fetches to the shards."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        self.forwarder = parameter_proxy(
            ctx.bind("ps-serve"), ctx.bind("ps-backend"), max_bytes=parameter_bytes(ctx)
        )

    def run(self) -> None:
        """Wait for the stop signal; the forwarder runs in its own thread."""
        log.info(
            "parameter server proxy: %s -> %s",
            self.forwarder.frontend_addr,
            self.forwarder.backend_addr,
        )
        while not self.stop.wait(0.2):
            if not self.forwarder.alive:
                raise RuntimeError("the parameter server proxy stopped unexpectedly")

    def close(self) -> None:
        """Stop forwarding."""
        self.forwarder.stop()
        super().close()


class ParameterShardRole(RoleBase):
    """Role `ps-shard`: keeps the learner's newest parameters and answers fetches."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        self.shard = ParameterShard(
            ctx.addr("parameter-publish"), ctx.addr("ps-backend"), max_bytes=parameter_bytes(ctx)
        )
        self._period = ctx.spec.session.metrics.learner_interval_seconds

    def run(self) -> None:
        """Serve until stopped."""
        log.info("parameter server shard %d subscribed to the learner", self.ctx.index)
        report, fetch_rate = Every(self._period), RateMeter()
        first = True
        while not self.stop.is_set():
            self.shard.poll(100)
            if first and self.shard.info is not None:
                log.info("first parameters received (iteration %d)", self.shard.info.iteration)
                first = False
            if report():
                s = self.shard
                self.report(
                    {
                        "ps/fetches_per_s": fetch_rate.rate(s.fetches),
                        "ps/unchanged_fraction": s.unchanged / max(1, s.fetches),
                        "ps/updates": s.updates,
                        "ps/iteration": s.info.iteration if s.info else -1,
                        "ps/rejected_messages": s.rejects.total,
                    },
                    # the global env steps the newest parameters were published at (one x axis)
                    max(s.info.env_steps, 0) if s.info else 0,
                )

    def close(self) -> None:
        """Close the shard's sockets."""
        self.shard.close()
        super().close()
