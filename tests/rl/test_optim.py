"""The learners' Adam: torch's update to the bit, torch's checkpoint layout, no compiler import.

torch.optim's Optimizer imports torch._dynamo on the first call of any of its methods (1.5 s of
a learner's start-up here); `surreal_kube.rl.optim.Adam` runs the same kernel without it.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from surreal_kube.rl.optim import Adam


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def train(model: torch.nn.Module, opt: object, steps: int, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(32, 5, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
        loss.backward()
        opt.step()  # type: ignore[attr-defined]


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_the_update_is_torchs_to_the_bit(weight_decay: float) -> None:
    ours_net, ref_net = net(), net()
    ours = Adam(ours_net.parameters(), lr=3e-3, weight_decay=weight_decay)
    ref = torch.optim.Adam(ref_net.parameters(), lr=3e-3, weight_decay=weight_decay, fused=True)
    for group in (ours.param_groups[0], ref.param_groups[0]):
        group["lr"] = 1e-3  # as PPO's schedule sets it
    train(ours_net, ours, 25)
    train(ref_net, ref, 25)
    for a, b in zip(ours_net.parameters(), ref_net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_checkpoints_load_across_torchs_adam_and_ours() -> None:
    ref_net = net()
    ref = torch.optim.Adam(ref_net.parameters(), lr=1e-3, fused=True)
    train(ref_net, ref, 5)
    # a checkpoint written by torch.optim.Adam resumes in ours and continues identically
    ours_net = copy.deepcopy(ref_net)
    ours = Adam(ours_net.parameters(), lr=5e-2)
    ours.load_state_dict(copy.deepcopy(ref.state_dict()))
    assert ours.param_groups[0]["lr"] == 1e-3
    train(ours_net, ours, 5, seed=2)
    train(ref_net, ref, 5, seed=2)
    for a, b in zip(ours_net.parameters(), ref_net.parameters(), strict=True):
        assert torch.equal(a, b)
    # and ours in torch's layout, loadable by torch.optim.Adam
    back = torch.optim.Adam(copy.deepcopy(ours_net).parameters(), lr=1.0, fused=True)
    back.load_state_dict(ours.state_dict())
    assert torch.equal(
        back.state_dict()["state"][0]["exp_avg"], ours.state_dict()["state"][0]["exp_avg"]
    )


def test_state_of_other_parameters_is_refused() -> None:
    saved = Adam(net().parameters(), lr=1e-3).state_dict()
    other = Adam(torch.nn.Linear(2, 2).parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="does not match the parameters"):
        other.load_state_dict(saved)


def test_a_learner_update_never_imports_torchs_compiler() -> None:
    code = """
import sys
import gymnasium as gym
from surreal_kube.rl.ppo import PPOLearner
from surreal_kube.rl.ppo_actor import PPOActor
from surreal_kube.rl.ddpg import DDPGAgentActor, DDPGLearner
from surreal_kube.rl.replay import UniformReplay, stack_items
from tests.rl.test_ppo import collect, small
from tests.rl.test_ddpg import cfg, fill
env = gym.make("Pendulum-v1")
spaces = env.observation_space, env.action_space
learner = PPOLearner(small(), *spaces, seed=0)
actor = PPOActor(small(), *spaces, seed=0)
actor.load_parameters(learner.parameters())
learner.learn(stack_items(collect(actor, env, 16)))
learner.load_state_dict(learner.state_dict())
config = cfg(twin_critic=True, policy_delay=2)
ddpg = DDPGLearner(config, *spaces, seed=0)
replay = UniformReplay(1000, seed=0)
fill(DDPGAgentActor(config, *spaces, seed=0), env, replay, 100)
ddpg.learn(replay.sample(32))
ddpg.learn(replay.sample(32))
ddpg.load_state_dict(ddpg.state_dict())
print("torch._dynamo" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr
