"""Single-process training: the same actors, learner and replay as a distributed run, no sockets.

This is both the debugger (one process, breakpoints work) and the baseline the distributed runtime
is measured against. The loop steps every agent's environment once, hands finished replay items to
the replay buffer, lets the learner consume batches as the start-sampling condition allows, and
gives the actors fresh parameters (after every PPO update, being on-policy; every `fetch_interval`
steps for DDPG, as distributed agents would fetch).

    python -m surreal_kube.rl.train --algorithm ppo --env gym:CartPole-v1 --max-env-steps 100000
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from surreal_kube.envs import check_env, make_env
from surreal_kube.experiment.spec import ExperimentSpec
from surreal_kube.rl.factory import (
    Mode,
    env_slot_seeds,
    make_actor,
    make_learner,
    make_replay,
    replay_ready,
)
from surreal_kube.rl.interfaces import Actor, Learner
from surreal_kube.rl.replay import PrioritizedReplay
from surreal_kube.rl.schedules import RunBudget, spend_budget
from surreal_kube.session.checkpoint import PeriodicCheckpoint
from surreal_kube.session.metrics import MetricWriter

if TYPE_CHECKING:
    import gymnasium as gym


@dataclass
class TrainResult:
    """What a run achieved; `env_steps_per_second` counts training time only (not final eval)."""

    env_steps: int
    learner_iterations: int
    wall_seconds: float
    env_steps_per_second: float
    eval_returns: list[float]
    eval_mean_return: float
    train_episode_returns: list[float] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    last_stats: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for JSON output)."""
        return asdict(self)


def evaluate(
    actor: Actor, env: gym.Env, episodes: int, seed: int, max_steps: int | None = None
) -> list[float]:
    """Undiscounted returns of `episodes` episodes with `actor` (an eval-mode actor)."""
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        actor.reset()
        total, steps, done = 0.0, 0, False
        while not done:
            action = actor.act(obs)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            actor.observe(obs, action, float(reward), next_obs, terminated, truncated)
            total += float(reward)
            steps += 1
            obs = next_obs
            done = terminated or truncated or (max_steps is not None and steps >= max_steps)
        returns.append(total)
    return returns


def train(
    spec: ExperimentSpec,
    max_env_steps: int | None = None,
    max_seconds: float | None = None,
    *,
    eval_episodes: int = 10,
    eval_interval_steps: int | None = None,
    target_return: float | None = None,
    updates_per_step: float = 1.0,
    device: str | torch.device | None = None,
    log_dir: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    callback: Callable[[int, dict[str, float]], bool | None] | None = None,
) -> TrainResult:
    """Train in one process until `max_env_steps` or `max_seconds` (spec's session limits else).

    Args:
        spec: the experiment (`surreal_kube.experiment.spec.ExperimentSpec`).
        max_env_steps, max_seconds: budgets; at least one must be set here or in `spec.session`.
        eval_episodes: episodes of the final evaluation (and of each periodic one).
        eval_interval_steps: also evaluate every this many env steps (history gets a row each).
        target_return: stop as soon as a periodic evaluation's mean return reaches this.
        updates_per_step: off-policy (DDPG) learner iterations per env step once sampling starts.
        device: learner device (default: `spec.session.learner_device`); agents follow
            `spec.agents.device`.
        log_dir: write TensorBoard scalars there.
        checkpoint_dir: periodic checkpoints there, per `spec.session.checkpoint`.
        callback: called as callback(env_steps, stats) after each learner iteration; returning
            True stops training.
    """
    max_env_steps = max_env_steps or spec.session.max_env_steps
    max_seconds = max_seconds or spec.session.max_time_seconds
    if max_env_steps is None and max_seconds is None:
        raise ValueError("set max_env_steps or max_seconds (or spec.session limits)")
    algo = spec.algorithm
    obs_space, action_space = check_env(spec.env, algo.name)
    seed = spec.session.seed
    learner: Learner = make_learner(spec, obs_space, action_space, device)
    replay = make_replay(spec)
    per_agent = spec.envs_per_agent()
    n_envs = spec.agents.count * per_agent
    envs = [make_env(spec.env) for _ in range(n_envs)]
    seeds = [env_slot_seeds(spec, i // per_agent, i % per_agent) for i in range(n_envs)]
    actors = [
        make_actor(spec, i // per_agent, "train", obs_space, action_space, seed=seeds[i][1])
        for i in range(n_envs)
    ]
    eval_mode: Mode = (
        "eval_deterministic" if spec.evals.mode == "deterministic" else "eval_stochastic"
    )
    eval_actor = make_actor(spec, 0, eval_mode, obs_space, action_space)
    eval_env = make_env(spec.env)
    params = learner.parameters()
    for actor in actors:
        actor.load_parameters(params)
    observations = []
    for i, (env, actor) in enumerate(zip(envs, actors, strict=True)):
        obs, _ = env.reset(seed=seeds[i][0])
        env.action_space.seed(seeds[i][0])
        actor.reset()
        observations.append(obs)
    ckpt = None
    if checkpoint_dir is not None:
        c = spec.session.checkpoint
        ckpt = PeriodicCheckpoint(
            checkpoint_dir, "learner", c.period, c.min_interval_seconds, c.keep_history, c.keep_best
        )
    writer = MetricWriter(log_dir)
    on_policy = algo.name == "ppo"
    fetch_interval = spec.agents.fetch_interval
    batch_size = algo.batch_size

    env_steps = 0
    episode_returns = [0.0] * n_envs
    finished: list[float] = []
    history: list[dict[str, float]] = []
    stats: dict[str, float] = {}
    update_credit = 0.0
    last_fetch = 0
    next_eval = eval_interval_steps
    stop = False
    start = time.perf_counter()
    eval_seconds = 0.0
    # the budget's time is training time, as out_of_budget counts it (evaluations excluded)
    budget = RunBudget(max_env_steps, max_seconds, clock=lambda: time.perf_counter() - eval_seconds)

    def out_of_budget() -> bool:
        if max_env_steps is not None and env_steps >= max_env_steps:
            return True
        return max_seconds is not None and time.perf_counter() - start - eval_seconds >= max_seconds

    while not stop and not out_of_budget():
        for i in range(n_envs):
            actor, env, obs = actors[i], envs[i], observations[i]
            action = actor.act(obs)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            for item in actor.observe(obs, action, float(reward), next_obs, terminated, truncated):
                replay.add(item)
            episode_returns[i] += float(reward)
            if terminated or truncated:
                finished.append(episode_returns[i])
                episode_returns[i] = 0.0
                next_obs, _ = env.reset()
                actor.reset()
            observations[i] = next_obs
        env_steps += n_envs

        learned = False
        if on_policy:
            while len(replay) >= batch_size and replay_ready(spec, len(replay)):
                spend_budget(learner, budget, env_steps)
                stats = learner.learn(replay.sample(batch_size))
                learned = True
                params = learner.parameters()
                for actor in actors:
                    actor.load_parameters(params)
                stop = stop or bool(callback and callback(env_steps, stats))
        elif replay_ready(spec, len(replay)):
            update_credit += updates_per_step * n_envs
            while update_credit >= 1.0:
                update_credit -= 1.0
                batch = replay.sample(batch_size)
                spend_budget(learner, budget, env_steps)
                stats = learner.learn(batch)
                learned = True
                priorities = getattr(learner, "last_priorities", None)
                if isinstance(replay, PrioritizedReplay) and priorities is not None:
                    replay.update_priorities(batch["indices"], priorities)
                stop = stop or bool(callback and callback(env_steps, stats))
            if env_steps - last_fetch >= fetch_interval:
                last_fetch = env_steps
                params = learner.parameters()
                for actor in actors:
                    actor.load_parameters(params)
        if learned:
            if finished:
                stats["charts/episodic_return"] = float(np.mean(finished[-10:]))
            stats["charts/SPS"] = env_steps / max(time.perf_counter() - start - eval_seconds, 1e-9)
            writer.add_scalars(stats, env_steps)
            if ckpt is not None:
                ckpt.save(learner.state_dict, env_steps, config=spec.model_dump(mode="json"))
        if next_eval is not None and env_steps >= next_eval:
            t0 = time.perf_counter()
            eval_actor.load_parameters(learner.parameters())
            returns = evaluate(eval_actor, eval_env, eval_episodes, seed + 100_000)
            eval_seconds += time.perf_counter() - t0
            row = {
                "env_steps": float(env_steps),
                "seconds": time.perf_counter() - start - eval_seconds,
                "eval_mean_return": float(np.mean(returns)),
            }
            history.append(row)
            writer.add_scalars({"charts/eval_return": row["eval_mean_return"]}, env_steps)
            next_eval += eval_interval_steps  # type: ignore[operator]
            if target_return is not None and row["eval_mean_return"] >= target_return:
                stop = True

    train_seconds = time.perf_counter() - start - eval_seconds
    eval_actor.load_parameters(learner.parameters())
    returns = evaluate(eval_actor, eval_env, eval_episodes, seed + 200_000) if eval_episodes else []
    for env in [*envs, eval_env]:
        env.close()
    writer.close()
    return TrainResult(
        env_steps=env_steps,
        learner_iterations=learner.iteration,
        wall_seconds=train_seconds,
        env_steps_per_second=env_steps / max(train_seconds, 1e-9),
        eval_returns=returns,
        eval_mean_return=float(np.mean(returns)) if returns else math.nan,
        train_episode_returns=finished,
        history=history,
        last_stats=stats,
    )


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> int:
    """Command line: build a spec from flags, train, print the result as JSON."""
    parser = argparse.ArgumentParser(prog="python -m surreal_kube.rl.train", description=__doc__)
    parser.add_argument("--algorithm", choices=["ppo", "ddpg"], default="ppo")
    parser.add_argument("--env", default="gym:CartPole-v1", help="e.g. gym:HalfCheetah-v5")
    parser.add_argument("--max-env-steps", type=int, default=None)
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--agents", type=int, default=1, help="agents (one env each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="learner device: auto, cpu, cuda")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm field (camelCase or snake_case), value as JSON; repeatable",
    )
    args = parser.parse_args(argv)
    if args.max_env_steps is None and args.max_seconds is None:
        parser.error("give --max-env-steps and/or --max-seconds")
    torch.set_num_threads(args.threads)
    algorithm: dict[str, Any] = {"name": args.algorithm}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        algorithm[key] = _parse_value(value)
    spec = ExperimentSpec.model_validate(
        {
            "algorithm": algorithm,
            "env": {"id": args.env},
            "agents": {"count": args.agents, "batch": 1},
            "replay": {
                "kind": "fifo" if args.algorithm == "ppo" else "uniform",
                "capacity": 4096 if args.algorithm == "ppo" else 1_000_000,
                "startSampling": 1 if args.algorithm == "ppo" else 3000,
            },
            "session": {"seed": args.seed},
        }
    )
    result = train(
        spec,
        args.max_env_steps,
        args.max_seconds,
        eval_episodes=args.eval_episodes,
        device=args.device,
        log_dir=args.log_dir,
        checkpoint_dir=args.checkpoint_dir,
    )
    summary = result.to_dict()
    summary.pop("train_episode_returns")
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
