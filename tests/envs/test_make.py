"""make_env, check_env and the wrappers (frame stack, action repeat, pixels, video)."""

import gymnasium as gym
import numpy as np
import pytest

from surreal_kube.envs import check_env, env_spaces, make_env, parse_env_id
from surreal_kube.envs.wrappers import ActionRepeat, FrameStack
from surreal_kube.errors import SpecError
from surreal_kube.experiment.spec import EnvSpec
from tests.isolation import run_isolated


def test_gym_prefix_and_five_tuple_step():
    env = make_env("gym:CartPole-v1")
    obs, _ = env.reset(seed=3)
    again, _ = make_env("gym:CartPole-v1").reset(seed=3)
    np.testing.assert_array_equal(obs, again)  # seeded reset
    out = env.step(env.action_space.sample())
    assert len(out) == 5
    assert isinstance(env.action_space, gym.spaces.Discrete)


def test_bad_ids_are_spec_errors():
    with pytest.raises(SpecError, match="gym:<gymnasium id>"):
        parse_env_id("CartPole-v1")
    with pytest.raises(SpecError, match=r"unknown environment.*did you mean 'gym:CartPole-v1'"):
        check_env("gym:CartPol-v1")


def test_check_env_mujoco_and_algorithm_fit():
    obs_space, action_space = check_env(EnvSpec(id="gym:HalfCheetah-v5"), "ddpg")
    assert obs_space.shape == (17,) and action_space.shape == (6,)
    with pytest.raises(SpecError, match="ddpg needs continuous"):
        check_env("gym:CartPole-v1", "ddpg")
    check_env("gym:CartPole-v1", "ppo")


def test_check_env_reports_creation_failures():
    with pytest.raises(SpecError, match="could not be created"):
        check_env(EnvSpec(id="gym:CartPole-v1", kwargs={"no_such_argument": 1}))


def test_max_episode_steps_truncates():
    env = make_env(EnvSpec(id="gym:Pendulum-v1", max_episode_steps=7))
    env.reset(seed=0)
    flags = [env.step(env.action_space.sample())[2:4] for _ in range(7)]
    assert flags[-1] == (False, True)  # truncated, not terminated, at step 7
    assert not any(any(f) for f in flags[:-1])


class Counter(gym.Env):
    """obs = [step count], reward 1 per step, episode of 10 steps."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t >= 10, False, {}


def test_action_repeat_sums_rewards_and_stops_at_episode_end():
    env = ActionRepeat(Counter(), 4)
    env.reset()
    obs, reward, *_ = env.step(0)
    assert obs[0] == 4 and reward == 4.0
    env.step(0)
    obs, reward, terminated, _, _ = env.step(0)
    assert obs[0] == 10 and reward == 2.0 and terminated


def test_frame_stack_along_channel_axis():
    env = FrameStack(Counter(), 3)
    assert env.observation_space.shape == (3,)
    obs, _ = env.reset()
    np.testing.assert_array_equal(obs, [0, 0, 0])
    env.step(0)
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs, [0, 1, 2])
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs, [1, 2, 3])


def test_spec_fields_apply():
    spec = EnvSpec(id="gym:Pendulum-v1", frame_stack=2, action_repeat=3)
    obs_space, _ = env_spaces(spec)
    assert obs_space.shape == (6,)


def _pixel_checks() -> None:
    pixel_env = make_env(
        EnvSpec(id="gym:InvertedPendulum-v5", pixel=True, frame_stack=2), low_dim=True
    )
    space = pixel_env.observation_space
    assert isinstance(space, gym.spaces.Dict)
    assert space["pixel"].shape == (6, 84, 84) and space["pixel"].dtype == np.uint8
    assert space["low_dim"].shape == (8,)
    obs, _ = pixel_env.reset(seed=0)
    assert obs["pixel"].dtype == np.uint8 and obs["pixel"].shape == (6, 84, 84)
    np.testing.assert_array_equal(obs["pixel"][:3], obs["pixel"][3:])  # reset repeats the frame
    assert obs["pixel"].std() > 0  # an actual rendering, not a blank frame
    first = obs["pixel"][3:].copy()
    for _ in range(5):
        obs, *_ = pixel_env.step(pixel_env.action_space.sample())
    np.testing.assert_array_equal(obs["pixel"][:3].shape, first.shape)
    assert not np.array_equal(obs["pixel"][3:], first)  # the newest frame is last
    pixel_env.close()


def test_pixel_observation_dict_uint8_channels_first():
    run_isolated(_pixel_checks)  # renders with EGL: see tests/isolation.py


def _check_env_pixels() -> None:
    obs_space, _ = check_env(EnvSpec(id="gym:InvertedPendulum-v5", pixel=True), "ppo")
    assert isinstance(obs_space, gym.spaces.Dict) and obs_space["pixel"].shape == (3, 84, 84)


def test_check_env_renders_pixel_specs():
    run_isolated(_check_env_pixels)
