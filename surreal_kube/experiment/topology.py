"""The process graph of an experiment, computed once from its spec.

Every backend reads this: the local backend turns each `Process` into an OS process, the Kubernetes
renderer turns each `Group` into a workload (one pod per replica, one container per process) and
each exposed group into a Service. Names, ports and environment variables are derived here and
nowhere else.

A `Group` is a host: processes in one replica of a group share a network namespace (a pod, or this
machine for the local backend), so they reach each other's pod-scoped endpoints on 127.0.0.1.

Shards (replay, parameter server) are containers of their service's group by default; with
`layout: pods` they are a replicated group of their own (`replay-shard`, `ps-shard`: one pod per
shard, like agents), and what joins them to their service becomes a cluster endpoint. An
endpoint's scope is therefore derived from the graph (`Topology.scope`): one declared `pod` is
bound on loopback only while every process that connects to it shares the binder's host.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from surreal_kube.errors import TopologyError
from surreal_kube.experiment.names import EXPERIMENT_OBJECTS

if TYPE_CHECKING:  # the spec module builds its experiment's topology with build_topology
    from surreal_kube.experiment.spec import ExperimentSpec

Scope = Literal["pod", "cluster"]
Protocol = Literal["zmq", "http"]
ENV_PREFIX = "SURREAL_"


@dataclass(frozen=True)
class Endpoint:
    """A named socket that exactly one process binds and others connect to."""

    name: str
    protocol: Protocol
    port: int
    """Container port on Kubernetes; the local backend allocates its own."""
    scope: Scope
    """`pod`: meant for processes of the same group (shard backends; `Topology.scope` makes it
    `cluster` where the shards are pods of their own); `cluster`: a Service."""

    @property
    def env_key(self) -> str:
        """`replay-sampler` -> `REPLAY_SAMPLER`: the middle of its environment variables."""
        return self.name.upper().replace("-", "_")

    @property
    def addr_var(self) -> str:
        """Variable holding the address a connecting process dials."""
        return f"{ENV_PREFIX}{self.env_key}_ADDR"

    @property
    def bind_var(self) -> str:
        """Variable holding the address the binding process listens on."""
        return f"{ENV_PREFIX}{self.env_key}_BIND"


ENDPOINTS: dict[str, Endpoint] = {
    e.name: e
    for e in (
        Endpoint("parameter-publish", "zmq", 7001, "cluster"),
        Endpoint("replay-sampler", "zmq", 7011, "cluster"),
        Endpoint("replay-sampler-backend", "zmq", 7013, "pod"),
        Endpoint("ps-serve", "zmq", 7020, "cluster"),
        Endpoint("ps-backend", "zmq", 7021, "pod"),
        Endpoint("tensorplex", "zmq", 7030, "cluster"),
        Endpoint("loggerplex", "zmq", 7040, "cluster"),
        Endpoint("tensorboard", "http", 6006, "cluster"),
    )
}

POD_ENDPOINTS_VAR = f"{ENV_PREFIX}POD_ENDPOINTS"
"""Names the endpoints of a process that stay inside its pod (scope `pod` in this graph): their
sockets need no CURVE, since nothing outside the pod reaches the pod's loopback (`comm.curve`)."""

SOCKET_PATH_MAX = 107
"""The longest path of a Unix socket (Linux's sun_path, 108 bytes with its NUL)."""

COLLECTOR_PREFIX = "replay-collector-"
COLLECTOR_BASE_PORT = 7100
"""Replay shard `i` takes experience on `replay-collector-<i>`, port 7100 + i on Kubernetes."""


def endpoint(name: str) -> Endpoint:
    """The endpoint called `name`: a fixed one, or the collector of one replay shard.

    Each replay shard binds its own collector and agents connect to all of them: the agents' PUSH
    sockets spread experience round-robin over the shards (skipping a shard whose queue is full),
    so experience takes one hop, agent to shard, like a bare ZeroMQ pipe. A forwarding load
    balancer in between measured at half the throughput of a bare pipe on its own, before any
    work of ours. The replay load balancer keeps what needs a broker: sample requests.
    """
    if name in ENDPOINTS:
        return ENDPOINTS[name]
    index = name.removeprefix(COLLECTOR_PREFIX)
    if name.startswith(COLLECTOR_PREFIX) and index.isdigit() and str(int(index)) == index:
        return Endpoint(name, "zmq", COLLECTOR_BASE_PORT + int(index), "cluster")
    raise KeyError(name)


def collector(shard: int) -> str:
    """The endpoint on which replay shard `shard` takes experience."""
    return f"{COLLECTOR_PREFIX}{shard}"


_METRICS = ("tensorplex", "loggerplex")


@dataclass(frozen=True)
class Process:
    """One role instance: a process locally, a container on Kubernetes."""

    name: str
    """Unique within the experiment: `learner`, `replay-shard-1`, `agents-3`, `evals-0`."""
    role: str
    """What `surreal-kube-role <role>` runs."""
    group: str
    """The group (host) it lives in."""
    index: int
    """Replica ordinal for replicated groups, shard index for shards, else 0."""
    agent_ids: tuple[int, ...]
    """Agents this process runs (agents role only)."""
    binds: tuple[str, ...]
    connects: tuple[str, ...]


@dataclass(frozen=True)
class Group:
    """A set of processes sharing one host; replicated groups are StatefulSets on Kubernetes."""

    name: str
    component: str
    """Key into the spec's resources, placement and images."""
    replicas: int
    roles: tuple[str, ...]
    """Roles of the processes in one replica (containers of one pod), the first is the main one."""
    processes: tuple[Process, ...]
    replicated: bool = False
    """One pod per process, its index the pod's ordinal, process `<group>-<index>` (agents,
    evals, shards laid out as pods): a StatefulSet on Kubernetes."""


@dataclass(frozen=True)
class Address:
    """Where one endpoint lives in one backend."""

    bind: str
    """What the binder listens on, e.g. `tcp://0.0.0.0:7011`."""
    connect: str
    """What others dial, e.g. `tcp://exp-replay.ns.svc.cluster.local:7011`."""
    host: str
    """The host (machine or pod group) whose port is taken, for clash checks."""
    port: int


@dataclass(frozen=True)
class Topology:
    """The whole graph: groups, processes and who binds what."""

    experiment: str
    groups: tuple[Group, ...]
    binders: Mapping[str, str] = field(default_factory=dict)
    """Endpoint name -> name of the process that binds it."""
    scopes: Mapping[str, Scope] = field(default_factory=dict)
    """Endpoint name -> its scope in this graph (see `scope`)."""

    def scope(self, name: str) -> Scope:
        """`pod` when every process connecting to endpoint `name` shares its binder's host (a
        replica of the same group that is not replicated), else `cluster`."""
        return self.scopes.get(name) or endpoint(name).scope

    def host(self, process: Process) -> str:
        """The host (pod) a process lives on: its group's, or its own replica's."""
        group = self.group_of(process)
        return f"{group.name}-{process.index}" if group.replicated else group.name

    def exposed(self, group: Group) -> tuple[str, ...]:
        """Cluster-scope endpoints bound in `group`: the ports of its Service."""
        return tuple(e for p in group.processes for e in p.binds if self.scope(e) == "cluster")

    @property
    def processes(self) -> tuple[Process, ...]:
        """Every process, in group order."""
        return tuple(p for g in self.groups for p in g.processes)

    def process(self, name: str) -> Process:
        """Look a process up by name."""
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(name)

    def group(self, name: str) -> Group:
        """Look a group up by name."""
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(name)

    def group_of(self, process: Process) -> Group:
        """The group a process belongs to."""
        return self.group(process.group)

    def derived_name_suffixes(self) -> list[tuple[str, str]]:
        """Every suffix appended to the experiment name on Kubernetes, with what it names.

        A StatefulSet's pods carry the label `controller-revision-hash: <set>-<hash>`, a label value
        limited to 63 characters, with a hash of up to 10 characters: that is often the longest.
        The experiment's own objects (`names.EXPERIMENT_OBJECTS`) come last.
        """
        out: list[tuple[str, str]] = []
        for g in self.groups:
            out.append((f"-{g.name}", f"the {g.component} workload"))
            if g.replicated:
                out.append((f"-{g.name}-{g.replicas - 1}", f"the last {g.name} pod"))
                out.append((f"-{g.name}-" + "x" * 10, f"the {g.name} StatefulSet's revision label"))
        out.extend((f"-{suffix}", what) for suffix, what in EXPERIMENT_OBJECTS)
        return out

    def addresses_local(
        self, ports: Mapping[str, int], host: str = "127.0.0.1", socket_dir: str | None = None
    ) -> dict[str, Address]:
        """Local addresses: everything on one host. With `socket_dir`, each ZeroMQ endpoint is
        a Unix socket there (a local run's, `launch/local/sockets.py`) and only HTTP ones take
        a port; without, every endpoint is on a port the caller allocated (as pods talk: the
        runtime tests' harness and the benchmarks)."""
        book: dict[str, Address] = {}
        for name in self.binders:
            ep = endpoint(name)
            if socket_dir is not None and ep.protocol == "zmq":
                path = f"{socket_dir}/{name}"
                if len(path) > SOCKET_PATH_MAX:
                    raise TopologyError(
                        f"socket path {path!r} is {len(path)} bytes, over a Unix socket's "
                        f"{SOCKET_PATH_MAX}: use a shorter folder"
                    )
                book[name] = Address(f"ipc://{path}", f"ipc://{path}", socket_dir, 0)
                continue
            port = ports[name]
            scheme = "tcp" if ep.protocol == "zmq" else "http"
            book[name] = Address(
                f"{scheme}://{host}:{port}", f"{scheme}://{host}:{port}", host, port
            )
        check_ports({n: a for n, a in book.items() if a.port})
        return book

    def addresses_kube(self, namespace: str, domain: str = "cluster.local") -> dict[str, Address]:
        """Addresses on Kubernetes: cluster endpoints through the group's Service DNS name, bound
        on every interface (the NetworkPolicy is their boundary); pod-scoped ones on loopback.

        A replicated group's process is dialled at its own pod's name under the group's
        headless Service (`<exp>-replay-shard-3.<exp>-replay-shard.<ns>.svc`), and binds what
        the first replica binds on the same port: one pod template serves every replica."""
        book: dict[str, Address] = {}
        for name, binder in self.binders.items():
            ep = endpoint(name)
            process = self.process(binder)
            group = self.group_of(process)
            scheme = "tcp" if ep.protocol == "zmq" else "http"
            host, port = self.host(process), ep.port
            service = f"{self.experiment}-{group.name}.{namespace}.svc.{domain}"
            if group.replicated:
                port = endpoint(group.processes[0].binds[process.binds.index(name)]).port
                service = f"{self.experiment}-{host}.{service}"
            if self.scope(name) == "cluster":
                listen, dns = "0.0.0.0", service
            else:  # between the containers of one pod: nothing outside it can even try
                listen = dns = "127.0.0.1"
            book[name] = Address(
                f"{scheme}://{listen}:{port}", f"{scheme}://{dns}:{port}", host, port
            )
        check_ports(book)
        return book

    def environment(
        self,
        process: Process,
        addresses: Mapping[str, Address],
        *,
        config_path: str,
        experiment_dir: str,
    ) -> dict[str, str]:
        """The environment a process starts with: the only input a role reads besides its config."""
        env = {
            f"{ENV_PREFIX}EXPERIMENT": self.experiment,
            f"{ENV_PREFIX}ROLE": process.role,
            f"{ENV_PREFIX}PROCESS": process.name,
            f"{ENV_PREFIX}INDEX": str(process.index),
            f"{ENV_PREFIX}CONFIG": config_path,
            f"{ENV_PREFIX}EXPERIMENT_DIR": experiment_dir,
        }
        for name in process.binds:
            env[endpoint(name).bind_var] = addresses[name].bind
        for name in process.connects:
            env[endpoint(name).addr_var] = addresses[name].connect
        private = [n for n in (*process.binds, *process.connects) if self.scope(n) == "pod"]
        if private:
            env[POD_ENDPOINTS_VAR] = ",".join(private)
        return env


def check_ports(book: Mapping[str, Address]) -> None:
    """Refuse an address book that uses one port twice on one host."""
    seen = Counter((a.host, a.port) for a in book.values())
    clashes = [key for key, n in seen.items() if n > 1]
    if clashes:
        host, port = clashes[0]
        users = sorted(n for n, a in book.items() if (a.host, a.port) == (host, port))
        raise TopologyError(f"port {port} is used twice on {host}: {', '.join(users)}")


def build_topology(name: str, spec: ExperimentSpec) -> Topology:
    """Compute the process graph of experiment `name` (see the module docstring)."""
    groups: list[Group] = []

    def single(
        group: str, component: str, role: str, binds: tuple[str, ...], connects: tuple[str, ...]
    ) -> Group:
        proc = Process(group, role, group, 0, (), binds, connects)
        return Group(group, component, 1, (role,), (proc,))

    groups.append(
        single(
            "learner", "learner", "learner", ("parameter-publish",), ("replay-sampler", *_METRICS)
        )
    )

    shards = spec.replay.shards
    groups.extend(
        _sharded(
            "replay",
            ("replay-sampler", "replay-sampler-backend"),
            "replay-shard",
            [((collector(i),), ("replay-sampler-backend", *_METRICS)) for i in range(shards)],
            spec.replay.layout,
        )
    )
    groups.extend(
        _sharded(
            "ps",
            ("ps-serve", "ps-backend"),
            "ps-shard",
            [((), ("parameter-publish", "ps-backend", *_METRICS))] * spec.ps.shards,
            spec.ps.layout,
        )
    )

    groups.append(single("tensorplex", "tensorplex", "tensorplex", ("tensorplex",), ()))
    groups.append(single("loggerplex", "loggerplex", "loggerplex", ("loggerplex",), ()))
    groups.append(single("tensorboard", "tensorboard", "tensorboard", ("tensorboard",), ()))

    batch = spec.agents.per_process
    agent_connects = ("ps-serve", *(collector(i) for i in range(shards)), *_METRICS)
    agent_procs = tuple(
        Process(
            f"agents-{g}",
            "agents",
            "agents",
            g,
            tuple(range(g * batch, (g + 1) * batch)),
            (),
            agent_connects,
        )
        for g in range(spec.agents.groups)
    )
    groups.append(Group("agents", "agent", len(agent_procs), ("agents",), agent_procs, True))

    if spec.evals.count:
        eval_procs = tuple(
            Process(f"evals-{i}", "eval", "evals", i, (), (), ("ps-serve", *_METRICS))
            for i in range(spec.evals.count)
        )
        groups.append(Group("evals", "eval", len(eval_procs), ("eval",), eval_procs, True))

    topo = Topology(name, tuple(groups))
    binders = _check_graph(topo)
    return Topology(name, tuple(groups), binders, _scopes(topo, binders))


def _sharded(
    service: str,
    binds: tuple[str, ...],
    shard_role: str,
    shards: list[tuple[tuple[str, ...], tuple[str, ...]]],
    layout: str,
) -> list[Group]:
    """A service's front process and its shards ((binds, connects) each): one group whose pod
    holds them all (`containers`), or the front's group and a replicated group of shard pods
    (`pods`), the shards' processes named `<shard_role>-<i>` either way."""
    front = Process(service, service, service, 0, (), binds, _METRICS)
    shard_group = service if layout == "containers" else shard_role
    procs = [
        Process(f"{shard_role}-{i}", shard_role, shard_group, i, (), b, c)
        for i, (b, c) in enumerate(shards)
    ]
    if layout == "containers":
        everyone = (front, *procs)
        return [Group(service, service, 1, tuple(p.role for p in everyone), everyone)]
    return [
        Group(service, service, 1, (service,), (front,)),
        Group(shard_role, shard_role, len(procs), (shard_role,), tuple(procs), True),
    ]


def _scopes(topo: Topology, binders: Mapping[str, str]) -> dict[str, Scope]:
    """Each endpoint's scope in this graph: a `pod` one that some process dials from another
    host (a shard pod dialling its service's backend) is `cluster` here."""
    host = {p.name: topo.host(p) for p in topo.processes}
    scopes: dict[str, Scope] = {name: endpoint(name).scope for name in binders}
    for p in topo.processes:
        for e in p.connects:
            if scopes[e] == "pod" and host[binders[e]] != host[p.name]:
                scopes[e] = "cluster"
    return scopes


def _check_graph(topo: Topology) -> dict[str, str]:
    """Every endpoint bound exactly once, every connect bound somewhere, pod endpoints in-pod."""
    binders: dict[str, str] = {}
    for p in topo.processes:
        for e in p.binds:
            try:
                endpoint(e)
            except KeyError:
                raise TopologyError(f"{p.name} binds unknown endpoint {e!r}") from None
            if e in binders:
                raise TopologyError(f"endpoint {e!r} is bound by both {binders[e]} and {p.name}")
            binders[e] = p.name
    names = [p.name for p in topo.processes]
    dupes = [n for n, c in Counter(names).items() if c > 1]
    if dupes:
        raise TopologyError(f"process name {dupes[0]!r} is used twice")
    checked: set[tuple[str, tuple[str, ...]]] = set()
    for p in topo.processes:
        if (p.group, p.connects) in checked:
            continue  # 10,000 agents connect alike: their connects are checked once
        checked.add((p.group, p.connects))
        for e in p.connects:
            if e not in binders:
                raise TopologyError(f"{p.name} connects to {e!r}, which no process binds")
    return binders
