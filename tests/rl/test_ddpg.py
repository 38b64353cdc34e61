"""DDPG actor and learner: scaling, noise, n-step items, targets, twin critics, priorities."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal_kube.experiment.algorithms import DDPGConfig, NoiseConfig
from surreal_kube.rl.ddpg import DDPGAgentActor, DDPGLearner
from surreal_kube.rl.noise import OUNoise, agent_sigma
from surreal_kube.rl.replay import PrioritizedReplay, UniformReplay

torch.set_num_threads(1)


@pytest.fixture
def pendulum():
    env = gym.make("Pendulum-v1")
    yield env
    env.close()


def cfg(**kw) -> DDPGConfig:
    return DDPGConfig(hidden_sizes=[32, 32], batch_size=32, **kw)


def fill(actor, env, replay, steps: int) -> None:
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for item in actor.observe(obs, action, float(reward), next_obs, terminated, truncated):
            replay.add(item)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()


def test_actions_are_rescaled_to_bounds_and_stored_normalized(pendulum):
    actor = DDPGAgentActor(
        cfg(noise=NoiseConfig(sigma=5.0)), pendulum.observation_space, pendulum.action_space, seed=0
    )
    obs, _ = pendulum.reset(seed=0)
    action = actor.act(obs)
    assert -2.0 <= action[0] <= 2.0
    next_obs, r, te, tr, _ = pendulum.step(action)
    actor.writer.n = 1
    (item,) = actor.observe(obs, action, r, next_obs, te, tr)
    np.testing.assert_allclose(item["actions"], action / 2.0, rtol=1e-6)
    assert set(item) == {
        "obs/low_dim",
        "next_obs/low_dim",
        "actions",
        "rewards",
        "terminals",
        "discounts",
    }


def test_eval_deterministic_has_no_noise(pendulum):
    actor = DDPGAgentActor(
        cfg(), pendulum.observation_space, pendulum.action_space, "eval_deterministic"
    )
    obs, _ = pendulum.reset(seed=0)
    assert len({float(actor.act(obs)[0]) for _ in range(5)}) == 1
    train = DDPGAgentActor(
        cfg(), pendulum.observation_space, pendulum.action_space, "train", seed=0
    )
    assert len({float(train.act(obs)[0]) for _ in range(5)}) == 5


def test_per_agent_sigma_spreads_linearly():
    noise = NoiseConfig(sigma=0.1, sigma_max=0.5)
    assert [agent_sigma(noise, i, 5) for i in range(5)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert agent_sigma(NoiseConfig(sigma=0.2), 3, 5) == 0.2


def test_ou_noise_is_correlated_and_mean_reverting():
    ou = OUNoise(1, sigma=0.3, rng=np.random.default_rng(0), theta=0.15, dt=0.01)
    xs = np.array([ou()[0] for _ in range(20_000)])
    lag1 = np.corrcoef(xs[:-1], xs[1:])[0, 1]
    assert lag1 > 0.95  # strongly correlated step to step
    # stationary std of OU: sigma / sqrt(2 theta)
    assert xs[5000:].std() == pytest.approx(0.3 / np.sqrt(0.3), rel=0.35)
    ou.reset()
    assert ou.x[0] == 0.0


def test_learner_updates_and_reports(pendulum):
    config = cfg()  # TD3's options are the defaults: twin critics, smoothing, delayed actor
    assert config.twin_critic and config.target_policy_smoothing and config.policy_delay == 2
    learner = DDPGLearner(config, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = DDPGAgentActor(config, pendulum.observation_space, pendulum.action_space, seed=0)
    replay = UniformReplay(1000, seed=0)
    fill(actor, pendulum, replay, 300)
    before = [p.clone() for p in learner.actor.parameters()]
    s1 = learner.learn(replay.sample(32))
    assert "losses/actor_loss" not in s1  # delayed policy update
    assert all(torch.equal(a, b) for a, b in zip(before, learner.actor.parameters(), strict=True))
    s2 = learner.learn(replay.sample(32))
    assert np.isfinite(s2["losses/actor_loss"]) and np.isfinite(s2["losses/critic_loss"])
    assert not all(
        torch.equal(a, b) for a, b in zip(before, learner.actor.parameters(), strict=True)
    )
    assert len(learner.critics) == 2


def test_soft_and_hard_target_updates(pendulum):
    replay = UniformReplay(1000, seed=0)
    actor = DDPGAgentActor(cfg(), pendulum.observation_space, pendulum.action_space, seed=0)
    fill(actor, pendulum, replay, 200)

    soft = DDPGLearner(
        cfg(tau=0.5, policy_delay=1), pendulum.observation_space, pendulum.action_space, seed=0
    )
    t0 = [p.clone() for p in soft.actor_target.parameters()]
    soft.learn(replay.sample(32))
    for p, tp, old in zip(soft.actor.parameters(), soft.actor_target.parameters(), t0, strict=True):
        torch.testing.assert_close(tp, 0.5 * old + 0.5 * p)

    hard = DDPGLearner(
        cfg(target_update="hard", target_update_interval=3),
        pendulum.observation_space,
        pendulum.action_space,
        seed=0,
    )
    t0 = [p.clone() for p in hard.actor_target.parameters()]
    for _ in range(2):
        hard.learn(replay.sample(32))
    assert all(torch.equal(a, b) for a, b in zip(t0, hard.actor_target.parameters(), strict=True))
    hard.learn(replay.sample(32))
    for p, tp in zip(hard.actor.parameters(), hard.actor_target.parameters(), strict=True):
        torch.testing.assert_close(tp, p)


def test_prioritized_batches_yield_td_priorities(pendulum):
    replay = PrioritizedReplay(1024, seed=0)
    actor = DDPGAgentActor(cfg(), pendulum.observation_space, pendulum.action_space, seed=0)
    fill(actor, pendulum, replay, 200)
    learner = DDPGLearner(cfg(), pendulum.observation_space, pendulum.action_space, seed=0)
    batch = replay.sample(32)
    learner.learn(batch)
    assert learner.last_priorities.shape == (32,)
    replay.update_priorities(batch["indices"], learner.last_priorities)


def test_parameters_roundtrip_into_actor(pendulum):
    config = cfg(use_z_filter=True)
    learner = DDPGLearner(config, pendulum.observation_space, pendulum.action_space, seed=0)
    replay = UniformReplay(1000, seed=0)
    actor = DDPGAgentActor(
        config, pendulum.observation_space, pendulum.action_space, "eval_deterministic"
    )
    fill(
        DDPGAgentActor(config, pendulum.observation_space, pendulum.action_space, seed=1),
        pendulum,
        replay,
        100,
    )
    learner.learn(replay.sample(32))
    actor.load_parameters(learner.parameters())
    obs = np.array([0.5, -0.5, 1.0], np.float32)
    fast = actor._policy({"low_dim": obs})
    norm = torch.as_tensor(learner.z_filter.normalize(obs))[None]
    expected = learner.actor({"low_dim": norm})[0].detach().numpy()
    np.testing.assert_allclose(fast, expected, rtol=1e-5, atol=1e-6)
    state = learner.state_dict()
    other = DDPGLearner(config, pendulum.observation_space, pendulum.action_space, seed=9)
    other.load_state_dict(state)
    for k, v in learner.parameters().items():
        np.testing.assert_array_equal(other.parameters()[k], v)


def test_discrete_actions_refused():
    with pytest.raises(ValueError, match="Box"):
        DDPGLearner(cfg(), gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))


def test_rng_states_travel_in_checkpoints(pendulum):
    learner = DDPGLearner(
        cfg(target_policy_smoothing=True), pendulum.observation_space, pendulum.action_space
    )
    state = learner.state_dict()
    expected = (torch.rand(3), torch.randn(3, generator=learner._generator))
    torch.manual_seed(99)
    learner._generator.manual_seed(99)
    learner.load_state_dict(state)
    torch.testing.assert_close(torch.rand(3), expected[0])
    torch.testing.assert_close(torch.randn(3, generator=learner._generator), expected[1])
