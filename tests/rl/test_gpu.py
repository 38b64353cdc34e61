"""GPU placement: learner alone where possible, agents spread, sharing when they must."""

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.experiment.topology import Process
from surreal_kube.rl.gpu import assign_gpus, process_kind

_ROLE_OF = {"learner": "learner", "agent": "agents", "eval": "eval"}


def procs(*names: str) -> list[Process]:
    """Processes as the topology would make them: `agent-3` of role agents, `replay` of replay."""
    out = []
    for name in names:
        role = _ROLE_OF.get(name.split("-")[0], name.split("-")[0])
        out.append(Process(name, role, role, 0, (), (), ()))
    return out


def test_no_gpu_does_nothing():
    assert assign_gpus(0, procs("learner", "agent-0")) == {}
    assert assign_gpus([], procs("learner")) == {}


def test_learner_alone_agents_spread_over_the_rest():
    out = assign_gpus(4, procs("learner", *[f"agent-{i}" for i in range(6)], "replay", "ps"))
    assert out["learner"] == "0"
    assert [out[f"agent-{i}"] for i in range(6)] == ["1", "2", "3", "1", "2", "3"]
    assert out["replay"] == "" and out["ps"] == ""


def test_one_gpu_is_shared():
    out = assign_gpus(1, procs("learner", "agent-0", "eval-0"))
    assert out == {"learner": "0", "agent-0": "0", "eval-0": "0"}


def test_two_gpus_one_each_side():
    out = assign_gpus(2, procs("learner", "agent-0", "agent-1", "eval-0"))
    assert out["learner"] == "0"
    assert {out["agent-0"], out["agent-1"], out["eval-0"]} == {"1"}


def test_visible_ids_and_explicit_kinds():
    out = assign_gpus(["2", "5"], {"trainer": "learner", "worker-a": "agent", "worker-b": "agent"})
    assert out == {"trainer": "2", "worker-a": "5", "worker-b": "5"}


def test_only_learners_or_only_agents_use_every_gpu():
    assert assign_gpus(2, procs("learner-0", "learner-1")) == {"learner-0": "0", "learner-1": "1"}
    assert assign_gpus(2, procs("agent-0", "agent-1", "agent-2")) == {
        "agent-0": "0",
        "agent-1": "1",
        "agent-2": "0",
    }


def test_the_kind_is_the_topology_role_not_the_name():
    """Names used to be parsed (`startswith("learner")`): a replay shard called `learner-cache`
    took the learner's GPU; the role says what a process runs."""
    odd = [
        Process("learner-cache", "replay-shard", "replay", 0, (), (), ()),
        Process("main", "learner", "learner", 0, (), (), ()),
        Process("evaluator", "eval", "evals", 0, (), (), ()),
    ]
    assert [process_kind(p) for p in odd] == ["other", "learner", "agent"]
    assert assign_gpus(2, odd) == {"learner-cache": "", "main": "0", "evaluator": "1"}
    topology = resolve_experiment("exp", sets=["evals.count=1"]).topology
    kinds = {p.name: process_kind(p) for p in topology.processes}
    assert kinds["learner"] == "learner" and kinds["agents-0"] == kinds["evals-0"] == "agent"
    assert {kinds[p.name] for p in topology.processes if p.group in ("replay", "ps")} == {"other"}
