"""An agent process's actors: one policy loaded once, one forward pass, each its own draws."""

import gymnasium as gym
import numpy as np
import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.rl.actor_group import make_actor_group
from surreal_kube.rl.factory import make_actor, make_learner


@pytest.fixture(scope="module")
def spaces():
    env = gym.make("Pendulum-v1")
    yield env.observation_space, env.action_space
    env.close()


def _spec(algorithm: str):
    flags = {"env.id": "gym:Pendulum-v1", "algorithm.name": algorithm, "agents.count": 4}
    return resolve_experiment("group", flags=flags).spec


def _params(spec, spaces):
    learner = make_learner(spec, *spaces, device="cpu")
    if getattr(learner, "z_filter", None) is not None:
        learner.z_filter.update(np.random.default_rng(0).normal(1.0, 2.0, size=(40, 3)))
    learner.iteration = 3
    return learner.parameters()


def test_ppo_actors_share_one_policy_and_act_as_they_would_alone(spaces):
    spec = _spec("ppo")
    slots = [(aid, 100 + aid) for aid in range(4)]
    group = make_actor_group(spec, slots, *spaces)
    alone = [make_actor(spec, aid, "train", *spaces, seed=seed) for aid, seed in slots]
    assert len({id(a.policy) for a in group.actors}) == 1  # one model, one filter
    params = _params(spec, spaces)
    group.load_parameters(params)  # once, for all four
    for actor in alone:
        actor.load_parameters(params)
    assert all(a.parameters_iteration == 3 for a in group.actors)
    obs = np.random.default_rng(1).normal(0.0, 2.0, size=(30, 4, 3)).astype(np.float32)
    for tick in obs:
        together = group.act([0, 1, 2, 3], list(tick))
        one_by_one = [a.act(o) for a, o in zip(alone, tick, strict=True)]
        np.testing.assert_allclose(together, one_by_one, rtol=1e-5, atol=1e-5)
        for a, b in zip(group.actors, alone, strict=True):
            np.testing.assert_allclose(a._pending["logp"], b._pending["logp"], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(a._pending["info"], b._pending["info"], rtol=1e-5, atol=1e-6)
    # a subset (agents that took their budget share sit out) acts in the order asked
    part = group.act([3, 1], [obs[0, 3], obs[0, 1]])
    assert len(part) == 2


def test_ddpg_actors_keep_their_own_networks_and_noise(spaces):
    spec = _spec("ddpg")
    group = make_actor_group(spec, [(0, 1), (1, 2)], *spaces)
    assert group.actors[0].net is not group.actors[1].net
    group.load_parameters(_params(spec, spaces))
    assert all(a.parameters_iteration == 3 for a in group.actors)
    actions = group.act([0, 1], [np.zeros(3, np.float32)] * 2)
    assert actions[0].shape == (1,) and not np.allclose(actions[0], actions[1])  # own noise
