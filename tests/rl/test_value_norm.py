"""The critic's target normalization (PopArt): outputs preserved, statistics right, and a critic
that follows returns of hundreds, which it did not before (Ant-v5: explained variance 0)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from surreal_kube.experiment.algorithms import PPOConfig
from surreal_kube.rl.ppo import PPOLearner
from surreal_kube.rl.ppo_actor import PPOActor
from surreal_kube.rl.replay import stack_items
from surreal_kube.rl.value_norm import ValueNormalizer
from tests.rl.test_ppo import collect

torch.set_num_threads(1)


def test_statistics_move_without_moving_the_values() -> None:
    torch.manual_seed(0)
    head = nn.Linear(16, 1)
    norm = ValueNormalizer(head, decay=0.9)
    x = torch.randn(100, 16)
    before = norm.denormalize(head(x))
    # before any update the head's output is the value itself
    torch.testing.assert_close(before, head(x))
    rng = np.random.default_rng(0)
    for _ in range(50):
        norm.update(rng.normal(300.0, 50.0, size=256))
        torch.testing.assert_close(norm.denormalize(head(x)), before, rtol=1e-4, atol=1e-3)
    assert norm.mean == pytest.approx(300.0, rel=0.02)
    assert norm.std == pytest.approx(50.0, rel=0.05)
    targets = np.array([250.0, 300.0, 400.0])
    np.testing.assert_allclose(norm.normalize(targets) * norm.std + norm.mean, targets, rtol=1e-5)


def test_degenerate_batches_leave_it_usable() -> None:
    head = nn.Linear(4, 1)
    norm = ValueNormalizer(head)
    norm.update(np.array([]))  # an empty batch changes nothing
    assert (norm.mean, norm.std) == (0.0, 1.0)
    norm.update(np.full(10, 5.0))  # constant returns (a sparse reward, not yet seen)
    assert norm.mean == pytest.approx(5.0) and norm.std == norm.min_std
    norm.update(np.array([np.nan, 1.0]))  # never poisons the statistics
    assert np.isfinite(norm.mean) and np.isfinite(norm.std)
    assert torch.isfinite(head.weight).all() and torch.isfinite(head.bias).all()
    with pytest.raises(ValueError, match="one output"):
        ValueNormalizer(nn.Linear(4, 2))


@pytest.fixture
def pendulum():
    env = gym.make("Pendulum-v1")
    yield env
    env.close()


def _critic_after(env: gym.Env, value_norm: bool, iterations: int) -> tuple[float, float]:
    """(explained variance, mean return target) after `iterations` on one fixed batch."""
    # the policy barely moves (tiny lr), so the targets are the critic's alone to follow; the
    # critic's learning rate as it was when Ant-v5's critic explained nothing
    cfg = PPOConfig(
        batch_size=16, value_norm=value_norm, lr_policy=1e-7, lr_baseline=1e-4, gamma=0.995
    )
    actor = PPOActor(cfg, env.observation_space, env.action_space, seed=0)
    batch = stack_items(collect(actor, env, 16))
    learner = PPOLearner(cfg, env.observation_space, env.action_space, seed=0)
    for _ in range(iterations):
        stats = learner.learn(dict(batch))
    return stats["losses/explained_variance"], stats["ppo/return_mean"]


def test_the_critic_follows_returns_of_hundreds(pendulum) -> None:
    """Pendulum's returns at gamma 0.995 are hundreds below zero, as Ant's are above it. The
    bootstrapped targets deepen as the critic learns; without normalization it cannot follow
    (measured here after 80 iterations: explained variance 0.50 against 0.12, mean target -226
    against -80, and the gap widens with more)."""
    explained, target = _critic_after(pendulum, True, 80)
    explained_raw, target_raw = _critic_after(pendulum, False, 80)
    assert explained > 0.4 and target < -150
    assert explained_raw < 0.2 and target_raw > -120


def test_the_statistics_travel_in_checkpoints(pendulum) -> None:
    cfg = PPOConfig(batch_size=8)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    batch = stack_items(collect(actor, pendulum, 8))
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    learner.learn(dict(batch))
    restored = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=1)
    restored.load_state_dict(learner.state_dict())
    assert (restored.value_norm.mean, restored.value_norm.std) == (
        learner.value_norm.mean,
        learner.value_norm.std,
    )
    # an older checkpoint (no statistics) is read as a head in return units
    old = learner.state_dict()
    del old["value_norm"]
    fresh = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=1)
    fresh.load_state_dict(old)
    assert (fresh.value_norm.mean, fresh.value_norm.std) == (0.0, 1.0)
