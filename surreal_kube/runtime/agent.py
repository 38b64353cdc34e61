"""Role `agents`: one process stepping the environments of a batch of agents.

Agent ids of process `agents-<i>` are `range(i * batch, (i + 1) * batch)` (`agents.batch`); each
agent steps `agents.envsPerAgent` environments, each with its own actor (actors keep per-episode
state: partial sub-trajectories, recurrent state), all sharing the process's parameter client and
experience sender, and, where the algorithm allows, one policy (`rl/actor_group.py`): each tick
acts on every environment's observation in one forward pass and sends the items it completed
in one message. Parameters are fetched per `agents.fetchMode` (each episode start, or every
`fetchInterval` steps); experience is sent `agents.flushIteration` items at a time.

Agents start acting only once the learner's first parameters arrive (state `waiting` until then):
experience from the initial random weights would be spent before any learner could use it, and a
step budget would be consumed by roles that started faster than the learner. After that, if the
parameter server or replay is down, the agents keep stepping: a failed fetch keeps the
current policy and is retried at the next due fetch, experience that cannot be sent is dropped
and counted. Both show in the log, in tensorplex (`agent/fetch_failures`, `agent/items_dropped`)
and in the progress file.

Replay that is up but holds inserts back (its rate limiter: the learner has not sampled enough
yet) is different: the agents wait for it, in state `waiting` with a message saying so, and
count the time (`agent/replay_wait_fraction`, `replay_wait_seconds` in the progress file).

Every item carries `param_version`, the iteration of the parameters that acted (the learner
measures and bounds policy lag with it). Scalars are reported against the experiment's global
env steps as the newest parameters state them (the one x axis; the agent's own steps before
the first parameters arrive).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from surreal_kube.comm.experience import ExperienceSender, on_policy_pipe
from surreal_kube.comm.parameters import FetchSchedule, ParameterClient
from surreal_kube.experiment.algorithms import flush_iteration
from surreal_kube.experiment.topology import collector
from surreal_kube.runtime.base import RoleBase
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.layout import item_layout, message_bytes, parameter_bytes_bound
from surreal_kube.runtime.lifecycle import Every, Heartbeat, RateMeter, StopFlag
from surreal_kube.runtime.reporter import AGENT_BUDGET_DONE, AGENT_ENV_STEPS
from surreal_kube.runtime.status import ProgressFile

log = logging.getLogger(__name__)


@dataclass
class Slot:
    """One environment and the actor that steps it."""

    agent_id: int
    env: Any
    actor: Any
    obs: Any = None
    episode_return: float = 0.0
    episode_steps: int = 0


class AgentsRole(RoleBase):
    """Role `agents`."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        from surreal_kube.envs import env_spaces, make_env
        from surreal_kube.rl.actor_group import make_actor_group
        from surreal_kube.rl.factory import env_slot_seeds

        spec = ctx.spec
        self.agent_ids = ctx.agent_ids
        self.progress = ProgressFile(ctx.experiment_dir, ctx.experiment, ctx.process, ctx.role)
        self.heartbeat = Heartbeat.from_env()  # the liveness probe's: see runtime.lifecycle
        restarts = int(self.progress.data["restarts"])
        obs_space, action_space = env_spaces(spec.env)
        # every environment its own seeds: its own episode starts and its own noise
        seeds = [
            (aid, env_slot_seeds(spec, aid, k, restarts))
            for aid in self.agent_ids
            for k in range(spec.envs_per_agent())
        ]
        self.actors = make_actor_group(
            spec, [(aid, actor_seed) for aid, (_, actor_seed) in seeds], obs_space, action_space
        )
        self.slots: list[Slot] = []
        for (aid, (env_seed, _)), actor in zip(seeds, self.actors.actors, strict=True):
            env = make_env(spec.env)
            obs, _ = env.reset(seed=env_seed)
            env.action_space.seed(env_seed)
            actor.reset()
            self.slots.append(Slot(aid, env, actor, obs))
        self.params = ParameterClient(
            ctx.addr("ps-serve"),
            timeout=spec.ps.timeout_seconds,
            on_fetch_parameter_failed=self._on_fetch_failed,
            on_fetch_parameter_success=self._on_fetch_success,
            max_bytes=parameter_bytes_bound(spec, obs_space, action_space),
        )
        on_policy = spec.replay.kind == "fifo"
        layout = item_layout(spec, obs_space, action_space)
        self.sender = ExperienceSender(
            [ctx.addr(collector(i)) for i in range(spec.replay.shards)],
            flush_iteration=flush_iteration(spec.algorithm, spec.agents.flush_iteration),
            **(on_policy_pipe(message_bytes(spec, layout)) if on_policy else {}),
            timeout=spec.ps.timeout_seconds,
            source=ctx.process,
            wait_hook=self._wait_for_replay,
        )
        self._version_stamp = np.array(-1, dtype=np.int64)
        self.schedule = FetchSchedule(spec.agents.fetch_mode, spec.agents.fetch_interval)
        self.steps_per_agent = {aid: 0 for aid in self.agent_ids}
        self.steps_left = {  # this run's allowance: the share less what earlier runs took
            aid: None if share is None else max(0, share - self.progress.prior_steps(aid))
            for aid, share in ctx.env_step_shares.items()
        }
        self.episodes = 0
        self.returns: dict[int, list[float]] = {aid: [] for aid in self.agent_ids}
        self.last_return: float | None = None
        self._fetch_down = False
        self.time_split = {"inference": 0.0, "env": 0.0, "experience": 0.0, "send": 0.0}
        """Seconds spent acting, stepping, cutting replay items and sending (serialize + socket)."""

    def _on_fetch_failed(self) -> None:
        if not self._fetch_down:
            log.warning(
                "parameter server at %s did not answer within %.1fs; acting with the current "
                "policy and retrying",
                self.params.addr,
                self.params.timeout,
            )
        self._fetch_down = True

    def _on_fetch_success(self) -> None:
        if self._fetch_down:
            log.info("parameter server reachable again")
        self._fetch_down = False

    def _wait_for_replay(self, waited: float) -> bool:
        """While replay holds inserts back: say so in the progress file; keep waiting unless
        stopping."""
        if self.progress.due():
            self._update_progress()
            self.progress.write(
                "waiting",
                f"replay is ahead of the learner (rate limiter): waiting, {waited:.1f}s so far",
            )
        return not self.stop.is_set()

    @property
    def global_env_steps(self) -> int:
        """The experiment's env steps as the newest parameters state them (else our own)."""
        info = self.params.info
        if info is not None and info.env_steps >= 0:
            return max(info.env_steps, self.progress_steps)
        return self.progress_steps

    @property
    def progress_steps(self) -> int:
        """This process's cumulative env steps (previous runs included)."""
        return int(self.progress.base["env_steps"]) + self.total_steps

    @property
    def param_version(self) -> int:
        """Iteration of the parameters the actors use (-1: initial weights)."""
        return self.params.info.iteration if self.params.info else -1

    def fetch(self) -> None:
        """Fetch and, when new, load the parameters into every actor."""
        if not self.params.fetch_into(self._load):  # another model's parameters: a drop
            return
        self._version_stamp = np.array(self.param_version, dtype=np.int64)
        if self.params.updates == 1:
            log.info("first parameters received (iteration %d)", self.param_version)

    def _load(self, params: dict[str, np.ndarray]) -> None:
        self.actors.load_parameters(params)  # once per process where the actors share a policy

    def wait_for_parameters(self) -> None:
        """Block (responsive to SIGTERM) until the parameter server has the learner's parameters."""
        self.progress.write("waiting", "waiting for the learner's first parameters")
        while not self.stop.is_set() and self.params.info is None:
            self.heartbeat.beat()
            self.fetch()
            if self.params.info is None:
                self.stop.wait(0.2)

    def step(self, episode_started: bool) -> bool:
        """Step every environment once; returns whether an episode started in any of them.

        One tick: the actors act on all observations at once (one forward pass where they
        share a policy), each environment steps, and the items the tick completed go to replay
        in one message.
        """
        if self.schedule.due(episode_start=episode_started):
            self.fetch()
        clock, split = time.perf_counter, self.time_split
        active = []  # the environments that step this tick: within their agent's budget share
        taking = dict(self.steps_per_agent)
        for i, slot in enumerate(self.slots):
            left = self.steps_left[slot.agent_id]
            if left is None or taking[slot.agent_id] < left:
                taking[slot.agent_id] += 1
                active.append(i)
        if not active:
            return False
        t0 = clock()
        actions = self.actors.act(active, [self.slots[i].obs for i in active])
        split["inference"] += clock() - t0
        started = False
        items: list[dict[str, np.ndarray]] = []
        for i, action in zip(active, actions, strict=True):
            slot = self.slots[i]
            t1 = clock()
            next_obs, reward, terminated, truncated, _ = slot.env.step(action)
            t2 = clock()
            items += slot.actor.observe(
                slot.obs, action, float(reward), next_obs, terminated, truncated
            )
            split["env"] += t2 - t1
            split["experience"] += clock() - t2
            slot.episode_return += float(reward)
            slot.episode_steps += 1
            self.steps_per_agent[slot.agent_id] += 1
            if terminated or truncated:
                self.returns[slot.agent_id].append(slot.episode_return)
                self.last_return = slot.episode_return
                self.episodes += 1
                slot.episode_return, slot.episode_steps = 0.0, 0
                next_obs, _ = slot.env.reset()
                slot.actor.reset()
                started = True
            slot.obs = next_obs
        if items:
            t3 = clock()
            for item in items:
                # PPO's actor stamps each item with its oldest step's version (a window can
                # span a fetch); others get the version acting now
                item.setdefault("param_version", self._version_stamp)
            self.sender.env_steps = self.progress_steps
            waited = self.sender.waited_seconds
            self.sender.send(items)
            if self.sender.waited_seconds > waited:
                self.fetch()  # replay held us back while the learner moved on: catch up now
            split["send"] += clock() - t3
        return started

    def run(self) -> None:
        """Step until stopped."""
        spec = self.ctx.spec
        log.info(
            "agents %s: %d environment(s) of %s, fetching per %s",
            ",".join(map(str, self.agent_ids)),
            len(self.slots),
            spec.env.id,
            spec.agents.fetch_mode,
        )
        self.wait_for_parameters()
        self.progress.write("running", "")
        report = Every(spec.session.metrics.agent_interval_seconds)
        step_rate, item_rate, wait_rate = RateMeter(), RateMeter(), RateMeter()
        started = True
        while not self.stop.is_set():
            if self.budget_spent():
                self._update_progress()
                self.progress.write("done", "took its share of session.maxEnvSteps")
                log.info("every agent took its share of the step budget; idle until stopped")
                # keep saying so: on a cluster tensorplex ends the run from it (a restarted
                # tensorplex too), runtime/conductor.py; locally the supervisor ends it from the
                # progress file, whose write a full disk may have lost (it is made again)
                while True:
                    self.heartbeat.beat()
                    self._report(0.0, 0.0, 0.0)
                    self.progress.write()
                    if self.stop.wait(spec.session.metrics.agent_interval_seconds):
                        break
                break
            self.heartbeat.beat()  # each tick: an env or a send stuck for good beats no more
            started = self.step(started)
            if report():
                self._report(
                    step_rate.rate(self.total_steps),
                    item_rate.rate(self.sender.sent_items),
                    wait_rate.rate(self.sender.waited_seconds),
                )
            if self.progress.due():
                self._update_progress()
                self.progress.write("running", "")

    def budget_spent(self) -> bool:
        """True once every agent of this process took its share of `session.maxEnvSteps`."""
        return all(
            left is not None and self.steps_per_agent[aid] >= left
            for aid, left in self.steps_left.items()
        )

    @property
    def total_steps(self) -> int:
        """Env steps of this run, over all agents of the process."""
        return sum(self.steps_per_agent.values())

    def _report(self, steps_per_s: float, items_per_s: float, wait_fraction: float) -> None:
        per_agent = steps_per_s / max(1, len(self.agent_ids))
        step = self.global_env_steps
        for aid in self.agent_ids:
            values: dict[str, float] = {"agent/env_steps_per_s": per_agent}
            if self.returns[aid]:
                values["charts/episodic_return"] = float(np.mean(self.returns[aid]))
                self.returns[aid].clear()
            self.report(values, step, index=aid)
        info = self.params.info
        self.report(
            {
                "agent/items_sent_per_s": items_per_s,
                "agent/items_dropped": self.sender.dropped_items,
                "agent/fetch_failures": self.params.failures,
                "agent/rejected_messages": self.params.rejects.total,
                "agent/param_version": self.param_version,
                "agent/param_age_s": time.time() - info.time if info else -1.0,
                "agent/replay_wait_fraction": min(1.0, wait_fraction),
                # the exact global env steps are the sum of these over agent processes
                AGENT_ENV_STEPS: self.progress_steps,
                AGENT_BUDGET_DONE: 1.0 if self.budget_spent() else 0.0,
            },
            step,
        )
        self.progress.update(
            rates={"env_steps_per_s": steps_per_s, "items_sent_per_s": items_per_s}
        )

    def _update_progress(self) -> None:
        self.progress.update(
            env_steps=self.total_steps,
            env_steps_per_agent=self.steps_per_agent,
            episodes=self.episodes,
            last_episode_return=self.last_return,
            param_version=self.param_version,
            extra={
                "items_sent": self.sender.sent_items,
                "items_dropped": self.sender.dropped_items,
                "replay_wait_seconds": round(self.sender.waited_seconds, 3),
                "replay_reachable": self.sender.healthy,
                "fetch_failures": self.params.failures,
                "parameter_server_reachable": not self._fetch_down,
                "time_split": {k: round(v, 3) for k, v in self.time_split.items()},
            },
        )

    def close(self) -> None:
        """Flush experience, write the final progress, close sockets and environments."""
        try:
            self.sender.flush()
        finally:
            self._update_progress()
            self.progress.write("stopped", "")
            self.sender.close()
            self.params.close()
            for slot in self.slots:
                slot.env.close()
            super().close()
