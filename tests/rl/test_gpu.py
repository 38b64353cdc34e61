"""GPU placement: learner alone where possible, agents spread, sharing when they must."""

from surreal_kube.rl.gpu import assign_gpus


def test_no_gpu_does_nothing():
    assert assign_gpus(0, ["learner", "agent-0"]) == {}
    assert assign_gpus([], ["learner"]) == {}


def test_learner_alone_agents_spread_over_the_rest():
    out = assign_gpus(4, ["learner", *[f"agent-{i}" for i in range(6)], "replay", "ps"])
    assert out["learner"] == "0"
    assert [out[f"agent-{i}"] for i in range(6)] == ["1", "2", "3", "1", "2", "3"]
    assert out["replay"] == "" and out["ps"] == ""


def test_one_gpu_is_shared():
    out = assign_gpus(1, ["learner", "agent-0", "eval-0"])
    assert out == {"learner": "0", "agent-0": "0", "eval-0": "0"}


def test_two_gpus_one_each_side():
    out = assign_gpus(2, ["learner", "agent-0", "agent-1", "eval-0"])
    assert out["learner"] == "0"
    assert {out["agent-0"], out["agent-1"], out["eval-0"]} == {"1"}


def test_visible_ids_and_explicit_kinds():
    out = assign_gpus(["2", "5"], {"trainer": "learner", "worker-a": "agent", "worker-b": "agent"})
    assert out == {"trainer": "2", "worker-a": "5", "worker-b": "5"}


def test_only_learners_or_only_agents_use_every_gpu():
    assert assign_gpus(2, ["learner-0", "learner-1"]) == {"learner-0": "0", "learner-1": "1"}
    assert assign_gpus(2, ["agent-0", "agent-1", "agent-2"]) == {
        "agent-0": "0",
        "agent-1": "1",
        "agent-2": "0",
    }
