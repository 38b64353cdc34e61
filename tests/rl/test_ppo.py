"""PPO actor and learner: items, parameters, filters, LSTM and CNN stems, adaptation, resume."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal_kube.experiment.algorithms import PPOConfig
from surreal_kube.rl.ppo import PPOLearner
from surreal_kube.rl.ppo_actor import PPOActor
from surreal_kube.rl.replay import FIFOReplay, stack_items
from surreal_kube.session.checkpoint import Checkpoint

torch.set_num_threads(1)


def collect(actor: PPOActor, env: gym.Env, n_items: int, seed: int = 0) -> list[dict]:
    items: list[dict] = []
    obs, _ = env.reset(seed=seed)
    while len(items) < n_items:
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        items += actor.observe(obs, action, float(reward), next_obs, terminated, truncated)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
    return items[:n_items]


def small(**kw) -> PPOConfig:
    return PPOConfig(epochs_policy=2, epochs_baseline=2, batch_size=8, **kw)


@pytest.fixture
def pendulum():
    env = gym.make("Pendulum-v1")
    yield env
    env.close()


def test_items_carry_what_the_learner_needs(pendulum):
    actor = PPOActor(small(), pendulum.observation_space, pendulum.action_space, seed=0)
    item = collect(actor, pendulum, 1)[0]
    assert item["obs/low_dim"].shape == (25, 3)
    assert item["actions"].shape == (25, 1)
    assert item["action_info"].shape == (25, 2)
    assert item["bootstrap/low_dim"].shape == (3,)
    for key in ("rewards", "terminals", "behaviour_logp", "mask", "train_mask"):
        assert item[key].shape == (25,)
    assert "rnn_h" not in item
    # The recorded behaviour log-prob is the log-density of the recorded (unclipped) action.
    info, a = item["action_info"], item["actions"]
    mean, log_std = info[:, :1], info[:, 1:]
    logp = (-0.5 * ((a - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    np.testing.assert_allclose(item["behaviour_logp"], logp, rtol=1e-5, atol=1e-5)


def test_env_gets_actions_clipped_to_bounds(pendulum):
    actor = PPOActor(
        PPOConfig(init_log_sig=3.0), pendulum.observation_space, pendulum.action_space, seed=0
    )
    obs, _ = pendulum.reset(seed=0)
    actions = [actor.act(obs) for _ in range(200)]
    assert all(-2.0 <= a[0] <= 2.0 for a in actions)
    assert max(abs(float(p["action"][0])) for p in [actor._pending]) >= 0  # raw sample kept


def test_numpy_fast_path_equals_torch(pendulum):
    learner = PPOLearner(small(), pendulum.observation_space, pendulum.action_space, seed=1)
    learner.z_filter.update(np.random.default_rng(0).normal(2.0, 3.0, size=(50, 3)))
    actor = PPOActor(
        small(), pendulum.observation_space, pendulum.action_space, "eval_deterministic"
    )
    actor.load_parameters(learner.parameters())
    assert actor._fast
    obs = np.array([0.3, -0.2, 4.0], dtype=np.float32)
    fast = actor._policy_info({"low_dim": obs})
    actor._fast = False
    slow = actor._policy_info({"low_dim": obs})
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-6)
    # ...and both equal the learner's own forward pass with its filter.
    x = torch.as_tensor(learner.z_filter.normalize(obs))[None, None]
    feats, _ = learner.model.features({"low_dim": x})
    np.testing.assert_allclose(
        fast, learner.model.policy_info(feats)[0, 0].detach().numpy(), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("mode", ["train", "eval_stochastic", "eval_deterministic"])
def test_numpy_act_equals_the_models_draw_for_draw(pendulum, mode):
    """`act`'s numpy path (the agents' hot path) and the model's path, same seed, same
    filtered parameters: the same actions, behaviour log-probabilities and action infos."""
    learner = PPOLearner(small(), pendulum.observation_space, pendulum.action_space, seed=1)
    learner.z_filter.update(np.random.default_rng(0).normal(2.0, 3.0, size=(50, 3)))
    params = learner.parameters()
    actors = [
        PPOActor(small(), pendulum.observation_space, pendulum.action_space, mode, seed=7)
        for _ in range(2)
    ]
    for actor in actors:
        actor.load_parameters(params)
    obs = np.random.default_rng(1).normal(0.0, 4.0, size=(20, 3)).astype(np.float32)
    fast = [actors[0].act(o) for o in obs]
    pending = actors[0]._pending
    slow = [actors[1]._act_model(o) for o in obs]
    np.testing.assert_allclose(np.array(fast), np.array(slow), rtol=1e-5, atol=1e-5)
    if mode == "train":
        for key in ("logp", "info"):
            np.testing.assert_allclose(pending[key], actors[1]._pending[key], rtol=1e-5, atol=1e-5)


def test_parameters_carry_filter_statistics_and_exclude_critic(pendulum):
    learner = PPOLearner(small(), pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(small(), pendulum.observation_space, pendulum.action_space, seed=0)
    batch = stack_items(collect(actor, pendulum, 8))
    learner.learn(batch)
    params = learner.parameters()
    assert all(isinstance(v, np.ndarray) for v in params.values())
    assert not any(k.startswith("model/critic.") for k in params)
    assert params["z_filter/count"][0] == batch["train_mask"].sum()
    actor.load_parameters(params)
    np.testing.assert_array_equal(actor.z_filter.mean, learner.z_filter.mean)
    assert actor.parameters_iteration == 1


def test_learn_reports_namespaced_finite_stats(pendulum):
    learner = PPOLearner(small(), pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(small(), pendulum.observation_space, pendulum.action_space, seed=0)
    stats = learner.learn(stack_items(collect(actor, pendulum, 8)))
    for key in (
        "losses/policy_loss",
        "losses/value_loss",
        "losses/entropy",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "ppo/clip_epsilon",
    ):
        assert np.isfinite(stats[key]), key
    assert stats["learner/env_steps"] == learner.env_steps > 0


def test_policy_improves_surrogate_on_a_fixed_batch(pendulum):
    learner = PPOLearner(
        PPOConfig(epochs_policy=1, epochs_baseline=1, lr_policy=1e-2),
        pendulum.observation_space,
        pendulum.action_space,
        seed=0,
    )
    actor = PPOActor(learner.config, pendulum.observation_space, pendulum.action_space, seed=0)
    actor.load_parameters(learner.parameters())
    batch = stack_items(collect(actor, pendulum, 16))
    first = learner.learn(dict(batch))
    learner.config = learner.config.model_copy(update={"epochs_policy": 20})
    later = learner.learn(dict(batch))
    assert later["losses/surrogate"] > first["losses/surrogate"]
    assert later["losses/approx_kl"] > 0


def test_kl_early_stop_cuts_policy_epochs(pendulum):
    cfg = PPOConfig(epochs_policy=10, epochs_baseline=1, lr_policy=0.05, early_stop_kl=1e-6)
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    stats = learner.learn(stack_items(collect(actor, pendulum, 8)))
    assert stats["ppo/policy_epochs"] == 1
    cfg_off = cfg.model_copy(update={"early_stop_kl": None})
    learner = PPOLearner(cfg_off, pendulum.observation_space, pendulum.action_space, seed=0)
    assert learner.learn(stack_items(collect(actor, pendulum, 8)))["ppo/policy_epochs"] == 10


def test_adaptive_kl_mode_adapts_beta_within_bounds(pendulum):
    cfg = PPOConfig(
        mode="adapt",
        epochs_policy=5,
        epochs_baseline=1,
        lr_policy=0.05,
        beta_range=(0.5, 2.0),
    )
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    betas = []
    for _ in range(4):
        stats = learner.learn(stack_items(collect(actor, pendulum, 8)))
        assert np.isfinite(stats["losses/kl_cutoff"])
        betas.append(learner.beta)
    assert betas[0] != 1.0  # a big lr moves far: beta grew (or shrank) from its initial 1.0
    assert all(0.5 <= b <= 2.0 for b in betas)


def test_clip_range_adapts_every_iteration_on_its_kl(pendulum):
    cfg = PPOConfig(epochs_policy=5, epochs_baseline=1, lr_policy=0.05)
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    learner.learn(stack_items(collect(actor, pendulum, 8)))
    assert learner.last_kl > 2 * cfg.kl_target
    assert learner.clip_epsilon == pytest.approx(0.2 / 1.5)
    actor.load_parameters(learner.parameters())  # on-policy again: the clip's centre is the actor
    actor.reset()
    learner.learn(stack_items(collect(actor, pendulum, 8, seed=1)))
    assert learner.clip_epsilon == pytest.approx(0.2 / 1.5 / 1.5)


def _kl_over_owned(learner: PPOLearner, before: torch.nn.Module, batch: dict) -> float:
    """KL(policy `before` || learner's policy now), mean over owned steps, computed directly."""
    data = learner._prepare(batch)
    h = data["h"]
    with torch.no_grad():
        p = before.policy_info(before.features(data["seq"], None)[0])[:, :h]
        q = learner.model.policy_info(learner.model.features(data["seq"], None)[0])[:, :h]
        kl = learner.dist.kl(p, q)
    mask = torch.as_tensor(data["train_mask"])
    return float((kl * mask).sum() / mask.sum())


def test_kl_reference_is_the_policy_at_the_iterations_start(pendulum):
    # The KL reported, early-stopped on and adapted to is the distance moved by this iteration
    # (not cumulative since an occasional refresh of an old copy), averaged over owned steps.
    cfg = PPOConfig(epochs_policy=3, epochs_baseline=1, lr_policy=0.01, use_z_filter=False)
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    for seed in range(3):
        batch = stack_items(collect(actor, pendulum, 8, seed=seed))
        before = copy.deepcopy(learner.model)
        stats = learner.learn(dict(batch))
        assert stats["losses/approx_kl"] == pytest.approx(
            _kl_over_owned(learner, before, batch), rel=1e-4
        )
        assert learner.last_kl == stats["losses/approx_kl"]


def test_filter_whitens_with_the_statistics_the_agents_acted_with(pendulum):
    # The agent acts with the learner's parameters and filter; with a learning rate too small to
    # move anything, the learner must see exactly the behaviour policy: a filter updated before
    # the loss would shift every observation and the policy with it.
    cfg = PPOConfig(epochs_policy=1, epochs_baseline=1, lr_policy=1e-12, lr_baseline=1e-12)
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    for seed in range(3):
        actor.load_parameters(learner.parameters())
        actor.reset()  # no window left open from acting with the previous parameters
        count = learner.z_filter.count
        stats = learner.learn(stack_items(collect(actor, pendulum, 8, seed=seed)))
        assert learner.z_filter.count > count  # the batch did go into the statistics, after
        assert stats["ppo/kl_behaviour"] < 1e-8, seed


def test_rng_state_travels_in_checkpoints(pendulum):
    cfg = small()
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    state = learner.state_dict()
    expected = torch.rand(4)
    torch.manual_seed(123)
    learner.load_state_dict(state)
    torch.testing.assert_close(torch.rand(4), expected)


def test_lstm_state_travels_with_subtrajectories(pendulum):
    cfg = small(rnn={"enabled": True, "hidden_size": 8})
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    items = collect(actor, pendulum, 3)
    assert items[0]["rnn_h"].shape == (1, 8)
    np.testing.assert_array_equal(items[0]["rnn_h"], 0)  # first window of an episode
    assert np.abs(items[1]["rnn_h"]).sum() > 0  # later windows start from the running state
    # Replaying the first 20 steps through the LSTM reproduces the state stored for window 2.
    obs = torch.as_tensor(items[0]["obs/low_dim"][None, :20])
    _, (h, _) = actor.model.rnn(
        actor.model.encoder({"low_dim": obs.reshape(20, 3)}).reshape(1, 20, -1)
    )
    np.testing.assert_allclose(h[:, 0].detach().numpy(), items[1]["rnn_h"], rtol=1e-5, atol=1e-6)
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    stats = learner.learn(stack_items(collect(actor, pendulum, 8)))
    assert np.isfinite(stats["losses/value_loss"])


class PixelEnv(gym.Env):
    """A tiny env with dict observations (low_dim + uint8 pixels) and discrete actions."""

    observation_space = gym.spaces.Dict(
        {
            "low_dim": gym.spaces.Box(-1, 1, (2,), np.float32),
            "pixel": gym.spaces.Box(0, 255, (6, 36, 36), np.uint8),
        }
    )
    action_space = gym.spaces.Discrete(3)

    def _obs(self):
        return {
            "low_dim": self.np_random.uniform(-1, 1, 2).astype(np.float32),
            "pixel": self.np_random.integers(0, 256, (6, 36, 36), dtype=np.uint8),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action == 1), False, self.t >= 30, {}


def test_cnn_stem_on_uint8_pixels_and_discrete_actions():
    env = PixelEnv()
    cfg = small(cnn={"enabled": True, "channels": [4, 8], "features": 16})
    actor = PPOActor(cfg, env.observation_space, env.action_space, seed=0)
    assert not actor._fast
    items = collect(actor, env, 8)
    assert items[0]["obs/pixel"].dtype == np.uint8  # stays uint8 until the model
    assert items[0]["bootstrap/pixel"].shape == (6, 36, 36)
    assert items[0]["actions"].dtype == np.int64
    learner = PPOLearner(cfg, env.observation_space, env.action_space, seed=0)
    stats = learner.learn(stack_items(items))
    assert np.isfinite(stats["losses/policy_loss"])
    actor.load_parameters(learner.parameters())


def test_state_dict_roundtrip_through_checkpoint(tmp_path, pendulum):
    cfg = small(use_r_filter=True)
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    replay = FIFOReplay(64)
    for item in collect(actor, pendulum, 24):
        replay.add(item)
    learner.learn(replay.sample(8))
    ckpt = Checkpoint(tmp_path, "learner")
    ckpt.save(learner.state_dict(), learner.iteration)
    restored = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=5)
    restored.load_state_dict(ckpt.restore().state)
    assert restored.iteration == 1 and restored.env_steps == learner.env_steps
    np.testing.assert_array_equal(restored.r_filter.m2, learner.r_filter.m2)
    for k, v in learner.parameters().items():
        np.testing.assert_array_equal(restored.parameters()[k], v)
    batch = replay.sample(8)
    torch.manual_seed(3)
    a = learner.learn(dict(batch))
    torch.manual_seed(3)
    b = restored.learn(dict(batch))
    assert a["losses/value_loss"] == pytest.approx(b["losses/value_loss"])


def test_learning_rate_schedule_and_gradient_clipping(pendulum):
    cfg = small(
        lr_schedule={"kind": "linear", "finalFraction": 0.1, "horizon": 2}, max_grad_norm=1e-3
    )
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    lrs = [
        learner.learn(stack_items(collect(actor, pendulum, 8)))["ppo/lr_policy"] for _ in range(3)
    ]
    assert lrs == pytest.approx([1e-4, 0.55e-4, 0.1e-4])
    assert learner.opt_baseline.param_groups[0]["lr"] == pytest.approx(0.1 * cfg.lr_baseline)
    # The policy optimizer only ever sees gradients clipped to max_grad_norm.
    seen = []
    step = learner.opt_policy.step

    def recording_step(*args, **kwargs):
        grads = [p.grad for p in learner.model.actor_parameters() if p.grad is not None]
        seen.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())
        return step(*args, **kwargs)

    learner.opt_policy.step = recording_step
    stats = learner.learn(stack_items(collect(actor, pendulum, 8)))
    assert stats["ppo/grad_norm"] > 1e-3  # the norm before clipping
    assert seen and max(seen) <= 1e-3 * 1.001


def test_scale_uint8_on_device():
    from surreal_kube.rl.models import scale_uint8

    x = torch.tensor([0, 128, 255], dtype=torch.uint8)
    torch.testing.assert_close(scale_uint8(x), torch.tensor([0.0, 128 / 255, 1.0]))
    assert scale_uint8(torch.tensor([2.0])).item() == 2.0  # floats pass through


@pytest.mark.parametrize("mode", ["clip", "adapt"])
def test_fused_flat_epochs_equal_sequential_epochs(pendulum, mode):
    """With no shared stem, fusing policy and baseline epochs must not change the update."""
    cfg = PPOConfig(mode=mode, epochs_policy=3, epochs_baseline=3, minibatches=1, lr_policy=1e-3)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    batch = stack_items(collect(actor, pendulum, 8))
    fused = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    sequential = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    assert fused._flat
    sequential._flat = False
    a = fused.learn(dict(batch))
    b = sequential.learn(dict(batch))
    for (name, p), q in zip(
        fused.model.named_parameters(), sequential.model.parameters(), strict=True
    ):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=name)
    assert a["losses/approx_kl"] == pytest.approx(b["losses/approx_kl"], rel=1e-3, abs=1e-7)
    assert a["losses/value_loss"] == pytest.approx(b["losses/value_loss"], rel=1e-4)


def test_minibatches_keep_their_size_when_episodes_are_short(pendulum):
    """Short episodes leave windows partly empty: fewer gradient steps, not tinier minibatches."""
    cfg = PPOConfig(batch_size=8, minibatches=4, epochs_policy=1, epochs_baseline=1)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    full = stack_items(collect(actor, pendulum, 8))
    half = dict(full)
    half["train_mask"] = full["train_mask"].copy()
    half["train_mask"][:, 10:] = 0.0  # 10 owned steps per window instead of 20
    counts = []
    for batch in (full, half):
        learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
        calls = []
        step = learner.opt_policy.step
        learner.opt_policy.step = lambda *a, step=step, calls=calls, **k: (
            calls.append(1) or step(*a, **k)
        )
        learner.learn(dict(batch))
        counts.append(len(calls))
    assert counts == [4, 2]  # minibatches of 8 * 20 / 4 = 40 steps: 160 -> 4, 80 -> 2


def test_a_window_spanning_a_fetch_is_stamped_with_the_older_version(pendulum):
    cfg = small()
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    learner.iteration = 3
    actor.load_parameters(learner.parameters())
    obs, _ = pendulum.reset(seed=0)
    items = []
    for t in range(25):
        if t == 10:
            learner.iteration = 4
            actor.load_parameters(learner.parameters())  # a fetch inside the first window
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, _ = pendulum.step(action)
        items += actor.observe(obs, action, float(reward), next_obs, terminated, truncated)
        obs = next_obs
    assert len(items) == 1
    assert int(items[0]["param_version"]) == 3
    assert items[0]["step_version"].tolist() == [3] * 10 + [4] * 15


def test_a_lagged_item_is_whitened_with_its_own_filter(pendulum):
    # The learner's weights barely move (tiny lr) but its filter moves with every batch: a batch
    # acted with version 0 must be whitened with version 0's filter, so that pi_start and the
    # behaviour policy agree (weights 1); the current filter would shift every observation.
    cfg = PPOConfig(epochs_policy=1, epochs_baseline=1, lr_policy=1e-12, lr_baseline=1e-12)
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    learner.learn(stack_items(collect(actor, pendulum, 8, seed=5)))  # filter now has statistics
    actor.load_parameters(learner.parameters())
    actor.reset()
    lagged = stack_items(collect(actor, pendulum, 8, seed=6))  # version 1
    learner.learn(stack_items(collect(actor, pendulum, 8, seed=7)))  # learner at 2, filter moved
    assert (lagged["param_version"] == 1).all()
    misses = learner.filter_misses  # (the first batch, acted with initial weights: version -1)
    stats = learner.learn(dict(lagged))
    assert stats["ppo/behaviour_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert learner.filter_misses == misses


def test_the_annealed_rate_reaches_its_floor_at_the_budget(pendulum):
    from surreal_kube.rl.schedules import RunBudget

    cfg = small(
        lr_schedule={"kind": "budget", "finalFraction": 0.1},
        clip_schedule={"kind": "budget", "finalFraction": 0.5},
    )
    learner = PPOLearner(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    actor = PPOActor(cfg, pendulum.observation_space, pendulum.action_space, seed=0)
    budget = RunBudget(max_env_steps=10_000, max_seconds=None)
    lrs, clips = [], []
    for steps in (0, 5_000, 10_000):
        learner.budget_fraction = budget.fraction(steps)
        adapted = learner.clip_epsilon
        stats = learner.learn(stack_items(collect(actor, pendulum, 8)))
        lrs.append(stats["ppo/lr_policy"])
        clips.append(stats["ppo/clip_epsilon"] / adapted)
    assert clips == pytest.approx([1.0, 0.75, 0.5])
    assert lrs == pytest.approx([1e-4, 0.55e-4, 0.1e-4])
    assert learner.opt_baseline.param_groups[0]["lr"] == pytest.approx(0.1 * cfg.lr_baseline)
