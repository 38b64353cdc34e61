"""Sample Factory (APPO) as a benchmark peer: trains on a gymnasium task and evaluates its
checkpoints the way `bench/learning.py` evaluates everyone (deterministic episodes).

It runs under a scratch interpreter of its own (Sample Factory 2.1.1 pins numpy below 2, which
this project's lock does not have), made by `bench/learning.py` (`sample_factory_python`); it is
a reference for the benchmark only, never a dependency of the package.

    python sf_peer.py train --env-id Ant-v5 --train-dir D --seed S [SF options...]
    python sf_peer.py evaluate --env-id Ant-v5 --train-dir D --episodes 5 --last 10

Settings: Sample Factory's own MuJoCo example (`sf_examples.mujoco`), with the rollout workers
and environments per worker the caller gives for the cores it has.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

ENV_NAME = "bench_env"
EXPERIMENT = "peer"


def make_env(
    env_id: str, _name: str, _cfg: Any, _env_config: Any, render_mode: str | None = None, **_: Any
) -> Any:
    """The task as gymnasium makes it (module-level: its workers are spawned, so it pickles)."""
    import gymnasium as gym

    return gym.make(env_id, render_mode=render_mode)


def _register(env_id: str) -> None:
    from sample_factory.envs.env_utils import register_env

    register_env(ENV_NAME, functools.partial(make_env, env_id))


def _cfg(train_dir: str, extra: list[str], evaluation: bool = False) -> Any:
    from sf_examples.mujoco.train_mujoco import parse_mujoco_cfg

    argv = ["--env", ENV_NAME, "--experiment", EXPERIMENT, "--train_dir", train_dir, *extra]
    return parse_mujoco_cfg(argv, evaluation=evaluation)


def train(env_id: str, train_dir: str, seed: int, extra: list[str]) -> int:
    from sample_factory.train import run_rl

    _register(env_id)
    return int(run_rl(_cfg(train_dir, ["--seed", str(seed), "--device", "cpu", *extra])))


def evaluate(env_id: str, train_dir: str, episodes: int, last: int, seed: int) -> dict[str, Any]:
    """Mean over the `last` checkpoints of their mean deterministic return over `episodes`."""
    import gymnasium as gym
    import numpy as np
    import torch
    from sample_factory.algo.utils.action_distributions import argmax_actions
    from sample_factory.algo.utils.rl_utils import prepare_and_normalize_obs
    from sample_factory.model.actor_critic import create_actor_critic
    from sample_factory.utils.attr_dict import AttrDict

    _register(env_id)
    folder = Path(train_dir) / EXPERIMENT
    cfg = AttrDict(json.loads((folder / "config.json").read_text()))
    checkpoints = sorted((folder / "checkpoint_p0").glob("checkpoint_*.pth"))[-last:]
    env = gym.make(env_id)
    # Sample Factory's models read a dict of observations ('obs' for a plain vector)
    obs_space = gym.spaces.Dict({"obs": env.observation_space})
    model = create_actor_critic(cfg, obs_space, env.action_space)
    model.eval()
    means, steps = [], []
    for path in checkpoints:
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        steps.append(int(state["env_steps"]))
        returns = []
        for episode in range(episodes):
            obs, _ = env.reset(seed=200_000 + seed * 100 + episode)
            done, total = False, 0.0
            rnn = torch.zeros([1, model.core.get_out_size() if cfg.use_rnn else 1])
            while not done:
                with torch.no_grad():
                    batch = {"obs": torch.as_tensor(np.asarray(obs, np.float32))[None]}
                    model(prepare_and_normalize_obs(model, batch), rnn)
                    action = argmax_actions(model.action_distribution())[0].numpy()
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        means.append(float(np.mean(returns)))
    env.close()
    return {
        "return": float(np.mean(means)) if means else float("nan"),
        "evaluations": len(means),
        "env_steps": max(steps) if steps else 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("train", "evaluate"))
    parser.add_argument("--env-id", required=True)
    parser.add_argument("--train-dir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--last", type=int, default=10)
    args, extra = parser.parse_known_args()
    if args.command == "train":
        return train(args.env_id, args.train_dir, args.seed, extra)
    result = evaluate(args.env_id, args.train_dir, args.episodes, args.last, args.seed)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
