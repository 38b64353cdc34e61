"""Building actors, learners and replays from an experiment spec; device choice."""

import gymnasium as gym
import pytest
import torch

from surreal_kube.errors import SpecError
from surreal_kube.experiment.spec import ExperimentSpec
from surreal_kube.rl.ddpg import DDPGAgentActor, DDPGLearner
from surreal_kube.rl.device import resolve_device
from surreal_kube.rl.factory import (
    actor_seed,
    env_slot_seeds,
    make_actor,
    make_learner,
    make_replay,
    replay_ready,
)
from surreal_kube.rl.ppo import PPOLearner
from surreal_kube.rl.ppo_actor import PPOActor
from surreal_kube.rl.replay import FIFOReplay, PrioritizedReplay, UniformReplay

OBS = gym.spaces.Box(-1, 1, (3,))
ACT = gym.spaces.Box(-2, 2, (1,))


def test_ppo_objects():
    spec = ExperimentSpec()
    assert isinstance(make_actor(spec, 0, "train", OBS, ACT), PPOActor)
    learner = make_learner(spec, OBS, ACT, "cpu")
    assert isinstance(learner, PPOLearner) and learner.device.type == "cpu"
    assert isinstance(make_replay(spec), FIFOReplay)


def test_ddpg_objects_and_per_agent_noise():
    spec = ExperimentSpec.model_validate(
        {
            "algorithm": {"name": "ddpg", "noise": {"sigma": 0.1, "sigmaMax": 0.3}},
            "agents": {"count": 3},
            "replay": {"kind": "prioritized"},
        }
    )
    actors = [make_actor(spec, i, "train", OBS, ACT) for i in range(3)]
    assert all(isinstance(a, DDPGAgentActor) for a in actors)
    assert [a.sigma for a in actors] == pytest.approx([0.1, 0.2, 0.3])
    assert isinstance(make_learner(spec, OBS, ACT, "cpu"), DDPGLearner)
    assert isinstance(make_replay(spec), PrioritizedReplay)
    spec2 = spec.model_copy(update={"replay": spec.replay.model_copy(update={"kind": "uniform"})})
    assert isinstance(make_replay(spec2), UniformReplay)


def test_eval_seeds_differ_from_agent_seeds():
    spec = ExperimentSpec()
    assert actor_seed(spec, 1) == 1
    assert actor_seed(spec, 1, "eval_deterministic") != actor_seed(spec, 1)


def test_bad_mode():
    with pytest.raises(ValueError):
        make_actor(ExperimentSpec(), 0, "play", OBS, ACT)  # type: ignore[arg-type]


def test_replay_ready_needs_start_sampling_and_a_batch():
    spec = ExperimentSpec.model_validate({"replay": {"startSampling": 100, "capacity": 1000}})
    assert not replay_ready(spec, 99)
    assert replay_ready(spec, 100)


def test_device_auto_and_explicit():
    assert resolve_device("cpu").type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert make_learner(ExperimentSpec(), OBS, ACT).device.type == expected  # learnerDevice auto


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(SpecError, match="no CUDA"):
        resolve_device("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_learner_holding_a_gpu_without_cuda_fails_naming_node_and_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path
):
    """`learnerDevice: auto` beside `resources.learner.gpu: 1` used to fall back to the CPU
    without a word; a learner that holds a GPU now computes on it or fails at start."""
    from surreal_kube.rl import device

    spec = ExperimentSpec.model_validate({"resources": {"learner": {"gpu": 1}}})
    monkeypatch.setenv("SURREAL_NODE_NAME", "gpu-node-7")
    monkeypatch.setattr(device, "NVIDIA_DRIVER_VERSION", tmp_path / "absent")
    with pytest.raises(SpecError) as err:
        make_learner(spec, OBS, ACT)
    message = str(err.value)
    assert "node gpu-node-7: no NVIDIA driver loaded" in message
    if torch.version.cuda:  # the runtime torch brings and the driver it needs
        major = int(torch.version.cuda.split(".")[0])
        assert f"runs CUDA {torch.version.cuda}, which needs driver >= " in message
        assert device.CUDA_MIN_DRIVER[major] in message
    # a loaded driver too old (or a container without the device) is named as it is
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19\n")
    monkeypatch.setattr(device, "NVIDIA_DRIVER_VERSION", version)
    with pytest.raises(SpecError, match="driver: NVRM version: NVIDIA UNIX x86_64 Kernel Module"):
        make_learner(spec, OBS, ACT)
    # without a GPU request, auto still means "CUDA when present"
    assert make_learner(ExperimentSpec(), OBS, ACT).device.type == "cpu"


def test_a_cpu_learner_beside_a_gpu_request_is_refused():
    with pytest.raises(ValueError, match=r"learnerDevice: 'cpu' beside resources.learner.gpu=1"):
        ExperimentSpec.model_validate(
            {"resources": {"learner": {"gpu": 1}}, "session": {"learnerDevice": "cpu"}}
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_learner_and_actor_when_present():
    spec = ExperimentSpec.model_validate({"agents": {"device": "cuda"}})
    learner = make_learner(spec, OBS, ACT)
    actor = make_actor(spec, 0, "train", OBS, ACT)
    assert learner.device.type == "cuda" and actor.device.type == "cuda"
    actor.load_parameters(learner.parameters())


def test_every_env_slot_gets_its_own_seeds():
    spec = ExperimentSpec()
    slots = {
        (agent, env, restarts): env_slot_seeds(spec, agent, env, restarts)
        for agent in range(3)
        for env in range(3)
        for restarts in range(3)
    }
    words = [w for pair in slots.values() for w in pair]
    assert len(set(words)) == len(words)  # no two slots, and no env/actor pair, share a seed
    assert all(0 <= w < 2**31 for w in words)
    assert env_slot_seeds(spec, 1, 0, 0, "eval_deterministic") != env_slot_seeds(spec, 1, 0, 0)
    other = ExperimentSpec.model_validate({"session": {"seed": 1}})
    assert env_slot_seeds(other, 0) != env_slot_seeds(spec, 0)
