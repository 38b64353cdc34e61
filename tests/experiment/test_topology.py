"""The process graph, asserted exactly for one representative experiment."""

from __future__ import annotations

import re

import pytest

from surreal_kube.errors import TopologyError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.experiment.topology import Address, check_ports, endpoint

METRICS = ("tensorplex", "loggerplex")


@pytest.fixture(scope="module")
def topo():
    exp = resolve_experiment(
        "exp",
        flags={"agents.count": 8, "agents.batch": 4, "evals.count": 2},
        sets=["replay.shards=2", "ps.shards=2"],
    )
    return exp.topology


def test_processes_groups_and_roles(topo) -> None:
    assert [(p.name, p.group, p.role, p.index, p.agent_ids) for p in topo.processes] == [
        ("learner", "learner", "learner", 0, ()),
        ("replay", "replay", "replay", 0, ()),
        ("replay-shard-0", "replay", "replay-shard", 0, ()),
        ("replay-shard-1", "replay", "replay-shard", 1, ()),
        ("ps", "ps", "ps", 0, ()),
        ("ps-shard-0", "ps", "ps-shard", 0, ()),
        ("ps-shard-1", "ps", "ps-shard", 1, ()),
        ("tensorplex", "tensorplex", "tensorplex", 0, ()),
        ("loggerplex", "loggerplex", "loggerplex", 0, ()),
        ("tensorboard", "tensorboard", "tensorboard", 0, ()),
        ("agents-0", "agents", "agents", 0, (0, 1, 2, 3)),
        ("agents-1", "agents", "agents", 1, (4, 5, 6, 7)),
        ("evals-0", "evals", "eval", 0, ()),
        ("evals-1", "evals", "eval", 1, ()),
    ]
    assert [(g.name, g.component, g.replicas, g.replicated) for g in topo.groups] == [
        ("learner", "learner", 1, False),
        ("replay", "replay", 1, False),
        ("ps", "ps", 1, False),
        ("tensorplex", "tensorplex", 1, False),
        ("loggerplex", "loggerplex", 1, False),
        ("tensorboard", "tensorboard", 1, False),
        ("agents", "agent", 2, True),
        ("evals", "eval", 2, True),
    ]


def test_binds_and_connects(topo) -> None:
    graph = {p.name: (p.binds, p.connects) for p in topo.processes}
    assert graph["learner"] == (("parameter-publish",), ("replay-sampler", *METRICS))
    assert graph["replay"] == (("replay-sampler", "replay-sampler-backend"), METRICS)
    collectors = ("replay-collector-0", "replay-collector-1")
    for i in (0, 1):
        # experience goes straight from every agent to every shard
        assert graph[f"replay-shard-{i}"] == (
            (f"replay-collector-{i}",),
            ("replay-sampler-backend", *METRICS),
        )
        assert graph[f"ps-shard-{i}"] == ((), ("parameter-publish", "ps-backend", *METRICS))
        assert graph[f"agents-{i}"] == ((), ("ps-serve", *collectors, *METRICS))
        assert graph[f"evals-{i}"] == ((), ("ps-serve", *METRICS))
    assert graph["ps"] == (("ps-serve", "ps-backend"), METRICS)
    assert graph["tensorplex"] == (("tensorplex",), ())
    assert graph["loggerplex"] == (("loggerplex",), ())
    assert graph["tensorboard"] == (("tensorboard",), ())
    assert dict(topo.binders) == {
        "parameter-publish": "learner",
        "replay-sampler": "replay",
        "replay-sampler-backend": "replay",
        "replay-collector-0": "replay-shard-0",
        "replay-collector-1": "replay-shard-1",
        "ps-serve": "ps",
        "ps-backend": "ps",
        "tensorplex": "tensorplex",
        "loggerplex": "loggerplex",
        "tensorboard": "tensorboard",
    }
    assert topo.exposed(topo.group("replay")) == (
        "replay-sampler",
        "replay-collector-0",
        "replay-collector-1",
    )
    assert topo.exposed(topo.group("agents")) == ()


def test_environment_local(topo) -> None:
    ports = {name: 20000 + i for i, name in enumerate(sorted(topo.binders))}
    book = topo.addresses_local(ports)
    env = topo.environment(
        topo.process("agents-1"), book, config_path="/c.yml", experiment_dir="/x"
    )
    assert env == {
        "SURREAL_EXPERIMENT": "exp",
        "SURREAL_ROLE": "agents",
        "SURREAL_PROCESS": "agents-1",
        "SURREAL_INDEX": "1",
        "SURREAL_CONFIG": "/c.yml",
        "SURREAL_EXPERIMENT_DIR": "/x",
        "SURREAL_PS_SERVE_ADDR": f"tcp://127.0.0.1:{ports['ps-serve']}",
        "SURREAL_REPLAY_COLLECTOR_0_ADDR": f"tcp://127.0.0.1:{ports['replay-collector-0']}",
        "SURREAL_REPLAY_COLLECTOR_1_ADDR": f"tcp://127.0.0.1:{ports['replay-collector-1']}",
        "SURREAL_TENSORPLEX_ADDR": f"tcp://127.0.0.1:{ports['tensorplex']}",
        "SURREAL_LOGGERPLEX_ADDR": f"tcp://127.0.0.1:{ports['loggerplex']}",
    }
    env = topo.environment(topo.process("replay"), book, config_path="/c.yml", experiment_dir="/x")
    assert env["SURREAL_REPLAY_SAMPLER_BACKEND_BIND"].startswith("tcp://127.0.0.1:")
    assert set(env) == {
        "SURREAL_EXPERIMENT",
        "SURREAL_ROLE",
        "SURREAL_PROCESS",
        "SURREAL_INDEX",
        "SURREAL_CONFIG",
        "SURREAL_EXPERIMENT_DIR",
        "SURREAL_REPLAY_SAMPLER_BIND",
        "SURREAL_REPLAY_SAMPLER_BACKEND_BIND",
        "SURREAL_TENSORPLEX_ADDR",
        "SURREAL_LOGGERPLEX_ADDR",
        "SURREAL_POD_ENDPOINTS",
    }
    shard = topo.environment(
        topo.process("replay-shard-1"), book, config_path="/c.yml", experiment_dir="/x"
    )
    assert shard["SURREAL_REPLAY_COLLECTOR_1_BIND"] == (
        f"tcp://127.0.0.1:{ports['replay-collector-1']}"
    )
    tb = topo.environment(topo.process("tensorboard"), book, config_path="/c", experiment_dir="/x")
    assert tb["SURREAL_TENSORBOARD_BIND"] == f"http://127.0.0.1:{ports['tensorboard']}"


def test_environment_kube(topo) -> None:
    book = topo.addresses_kube("team-a")
    learner = topo.environment(topo.process("learner"), book, config_path="/c", experiment_dir="/x")
    assert learner["SURREAL_PARAMETER_PUBLISH_BIND"] == "tcp://0.0.0.0:7001"
    assert (
        learner["SURREAL_REPLAY_SAMPLER_ADDR"] == "tcp://exp-replay.team-a.svc.cluster.local:7011"
    )
    shard = topo.environment(
        topo.process("replay-shard-1"), book, config_path="/c", experiment_dir="/x"
    )
    assert shard["SURREAL_REPLAY_SAMPLER_BACKEND_ADDR"] == "tcp://127.0.0.1:7013"  # same pod
    assert shard["SURREAL_REPLAY_COLLECTOR_1_BIND"] == "tcp://0.0.0.0:7101"
    agent = topo.environment(topo.process("agents-0"), book, config_path="/c", experiment_dir="/x")
    assert agent["SURREAL_REPLAY_COLLECTOR_1_ADDR"] == (
        "tcp://exp-replay.team-a.svc.cluster.local:7101"
    )
    assert shard["SURREAL_TENSORPLEX_ADDR"] == "tcp://exp-tensorplex.team-a.svc.cluster.local:7030"


def test_a_port_used_twice_on_one_host_is_refused(topo) -> None:
    ports = {name: 20000 for name in topo.binders}
    with pytest.raises(TopologyError, match=re.escape("port 20000 is used twice on 127.0.0.1")):
        topo.addresses_local(ports)
    check_ports({"a": Address("x", "x", "pod-a", 1), "b": Address("y", "y", "pod-b", 1)})


def test_no_evals_means_no_eval_group() -> None:
    topo = resolve_experiment("exp", flags={"evals.count": 0}).topology
    assert "evals" not in [g.name for g in topo.groups]


def test_shard_collectors_are_endpoints_of_their_own() -> None:
    assert endpoint("replay-collector-3").port == 7103
    assert endpoint("replay-collector-3").scope == "cluster"
    assert endpoint("ps-serve").port == 7020
    for bad in ("replay-collector-", "replay-collector-01", "replay-collector-x", "nope"):
        with pytest.raises(KeyError):
            endpoint(bad)


def test_a_resolved_experiment_carries_its_topology_built_once() -> None:
    """`Experiment.topology` is the one graph every layer reads (validation built it); the spec
    is frozen, so it cannot go stale in place; a copy with another spec gets its own."""
    import pydantic

    from surreal_kube.experiment.spec import ImageSpec

    exp = resolve_experiment("exp-once", flags={"agents.count": 3})
    assert exp.topology is exp.topology
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        exp.spec.agents.count = 5  # type: ignore[misc]
    agents = exp.spec.agents.model_copy(update={"count": 5})
    more = exp.model_copy(update={"spec": exp.spec.model_copy(update={"agents": agents})})

    assert exp.topology.group("agents").replicas == 3
    assert more.topology.group("agents").replicas == 5
    pinned = exp.with_images({"cpu": ImageSpec(image="registry.local/cpu@sha256:" + "a" * 64)})
    assert pinned.topology is exp.topology  # images are not part of the graph
    assert pinned.spec.images["cpu"].image.startswith("registry.local/")
    assert exp.spec.images["cpu"].build is not None  # the original is untouched


def test_pod_scoped_endpoints_bind_loopback_on_kubernetes() -> None:
    """Issue 25 item 1: what only the containers of one pod use (the replay's and the ps's
    backends) listens on 127.0.0.1; what other pods dial listens on every interface."""
    topo = resolve_experiment("exp-bind", flags={"replay.shards": 2, "ps.shards": 2}).topology
    book = topo.addresses_kube("rl")
    scoped = {name: endpoint(name).scope for name in book}
    assert "pod" in scoped.values() and "cluster" in scoped.values()
    for name, address in book.items():
        if scoped[name] == "cluster":
            assert address.bind.split("://")[1].startswith("0.0.0.0:"), name
        else:
            assert address.bind.split("://")[1].startswith("127.0.0.1:"), name
            assert address.connect.split("://")[1].startswith("127.0.0.1:"), name


def test_shards_as_pods_are_groups_of_their_own_and_their_backends_cluster_endpoints() -> None:
    exp = resolve_experiment(
        "exp",
        sets=["replay.shards=3", "replay.layout=pods", "ps.shards=2", "ps.layout=pods"],
    )
    topo = exp.topology
    assert [(g.name, g.component, g.replicas, g.replicated, g.roles) for g in topo.groups][:5] == [
        ("learner", "learner", 1, False, ("learner",)),
        ("replay", "replay", 1, False, ("replay",)),
        ("replay-shard", "replay-shard", 3, True, ("replay-shard",)),
        ("ps", "ps", 1, False, ("ps",)),
        ("ps-shard", "ps-shard", 2, True, ("ps-shard",)),
    ]
    # the process names are the same in both layouts: logs, status files and metric sources
    assert [p.name for p in topo.group("replay-shard").processes] == [
        "replay-shard-0",
        "replay-shard-1",
        "replay-shard-2",
    ]
    assert topo.scope("replay-sampler-backend") == "cluster"
    assert topo.scope("ps-backend") == "cluster"
    assert topo.exposed(topo.group("replay")) == ("replay-sampler", "replay-sampler-backend")
    book = topo.addresses_kube("ns")
    assert book["replay-collector-2"] == Address(
        "tcp://0.0.0.0:7100",
        "tcp://exp-replay-shard-2.exp-replay-shard.ns.svc.cluster.local:7100",
        "replay-shard-2",
        7100,
    )
    # the default layout keeps the backends inside the pod, on loopback
    one_pod = resolve_experiment("exp", sets=["replay.shards=3", "ps.shards=2"]).topology
    assert one_pod.scope("replay-sampler-backend") == "pod" == one_pod.scope("ps-backend")
    assert one_pod.addresses_kube("ns")["ps-backend"].bind == "tcp://127.0.0.1:7021"


def test_each_process_is_told_which_of_its_endpoints_stay_in_its_pod() -> None:
    """Issue 25 item 2: the hops between a service and its shards in one pod skip CURVE; the
    process learns which they are from the graph, the same list on both ends of each hop, and
    none once the shards are pods of their own (the hop crosses the network: CURVE again)."""
    one_pod = resolve_experiment("exp", sets=["replay.shards=2", "ps.shards=2"]).topology

    def pod_endpoints(topo, process: str) -> str | None:
        book = topo.addresses_kube("ns")
        env = topo.environment(topo.process(process), book, config_path="/c", experiment_dir="/x")
        return env.get("SURREAL_POD_ENDPOINTS")

    assert pod_endpoints(one_pod, "ps") == "ps-backend"
    assert pod_endpoints(one_pod, "ps-shard-1") == "ps-backend"
    assert pod_endpoints(one_pod, "replay") == "replay-sampler-backend"
    assert pod_endpoints(one_pod, "replay-shard-0") == "replay-sampler-backend"
    for process in ("learner", "agents-0", "evals-0", "tensorplex", "loggerplex"):
        assert pod_endpoints(one_pod, process) is None, process
    pods = resolve_experiment(
        "exp", sets=["replay.shards=2", "replay.layout=pods", "ps.shards=2", "ps.layout=pods"]
    ).topology
    for process in ("ps", "ps-shard-1", "replay", "replay-shard-0"):
        assert pod_endpoints(pods, process) is None, process
