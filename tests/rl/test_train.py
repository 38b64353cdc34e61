"""The single-process trainer: budgets, results, checkpoints, metrics, CLI."""

import json

import pytest
import torch

from surreal_kube.experiment.spec import ExperimentSpec
from surreal_kube.rl.train import main, train
from surreal_kube.session.checkpoint import Checkpoint

torch.set_num_threads(1)


def ppo_spec(**session) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "algorithm": {"name": "ppo", "batchSize": 8, "epochsPolicy": 2, "epochsBaseline": 2},
            "env": {"id": "gym:CartPole-v1"},
            "agents": {"count": 2, "batch": 1},
            "replay": {"kind": "fifo", "capacity": 256, "startSampling": 8},
            "session": {"seed": 0, "checkpoint": {"period": 2, "minIntervalSeconds": 0}, **session},
        }
    )


def test_ppo_run_reports_steps_rate_and_evals(tmp_path):
    result = train(
        ppo_spec(),
        max_env_steps=1200,
        eval_episodes=2,
        eval_interval_steps=600,
        log_dir=tmp_path / "tb",
    )
    assert result.env_steps >= 1200
    assert result.learner_iterations >= 3  # 2 agents x 600 steps / (8 windows x 20 steps)
    assert result.env_steps_per_second > 0
    assert len(result.eval_returns) == 2 and result.eval_mean_return > 0
    assert [row["env_steps"] for row in result.history] == [600.0, 1200.0]
    assert "losses/approx_kl" in result.last_stats
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_checkpoints_are_written_and_restorable(tmp_path):
    spec = ppo_spec()
    result = train(spec, max_env_steps=1000, eval_episodes=0, checkpoint_dir=tmp_path)
    ckpt = Checkpoint(tmp_path, "learner")
    assert 1 <= len(ckpt) <= spec.session.checkpoint.keep_history
    loaded = ckpt.restore()
    assert loaded.state["iteration"] <= result.learner_iterations
    assert loaded.meta["config"]["algorithm"]["name"] == "ppo"


def test_time_budget_and_missing_budget():
    # no env-step budget: the run ends (the event) because its second was spent; how fast it
    # steps is bench/learning.py's, not a test's
    result = train(ppo_spec(), max_seconds=1.0, eval_episodes=1)
    assert result.env_steps > 0 and len(result.eval_returns) == 1
    with pytest.raises(ValueError, match="max_env_steps or max_seconds"):
        train(ppo_spec(), eval_episodes=0)


def test_callback_can_stop_training():
    seen = []
    result = train(
        ppo_spec(),
        max_env_steps=100_000,
        eval_episodes=0,
        callback=lambda s, st: seen.append(s) or True,
    )
    assert len(seen) == 1 and result.learner_iterations == 1


def test_ddpg_prioritized_run():
    spec = ExperimentSpec.model_validate(
        {
            "algorithm": {"name": "ddpg", "batchSize": 16, "hiddenSizes": [16, 16]},
            "env": {"id": "gym:Pendulum-v1"},
            "agents": {"count": 1, "batch": 1},
            "replay": {"kind": "prioritized", "capacity": 1024, "startSampling": 50},
        }
    )
    result = train(spec, max_env_steps=300, eval_episodes=1)
    # 3-step transitions lag 2 steps behind: 50 items exist after step 52, then one update per
    # env step through step 300.
    assert result.learner_iterations == 300 - 52 + 1
    assert "losses/critic_loss" in result.last_stats


def test_cli(capsys):
    assert (
        main(
            [
                "--env",
                "gym:CartPole-v1",
                "--max-env-steps",
                "400",
                "--eval-episodes",
                "1",
                "--set",
                "batchSize=4",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["env_steps"] >= 400 and out["learner_iterations"] >= 1
