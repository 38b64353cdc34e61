"""A hostile peer attacks every address of a whole running local experiment.

The experiment is a real `surreal-kube create --local --detach` run (PPO on CartPole, one agent,
one evaluator, a small budget). Once it learns, a peer connects to every ZeroMQ address the
experiment's state lists (its Unix sockets: a process of the run's own user, the only kind the
run's folder lets in, launch/local/sockets.py) and sends what issue 25 found would crash, stall, poison or end a run:
malformed wire frames, odd-shaped and old-schema experience, oversized messages, forged sample
requests, a fake replay shard, a fake parameter server with a bad hash, scalars and log records
from names outside the topology, and a subscribe storm. Then: no role died or restarted, the
learner keeps learning, the run ends at its budget (not before) with its results, the step count
is not inflated, and every receiver counted what it dropped.

Everything waits on events (files, sockets); nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.parameters import content_hash
from surreal_kube.comm.sampling import READY, REPLY
from surreal_kube.envs import env_spaces
from surreal_kube.launch.local.folder import read_json
from surreal_kube.runtime.context import load_experiment
from surreal_kube.runtime.layout import item_layout

pytestmark = pytest.mark.slow

SK = [sys.executable, "-m", "surreal_kube.cli.main"]
BUDGET = 96000
"""About 30 s here. CI saw a 24000-step run's agent reach its budget during the attack: it
fetched no more, and the forged parameters only reached the eval."""
FINAL = ("Succeeded", "Failed", "Stopped")
STRANGER = b"stranger"
"""The routing id of the peer's own sample requests."""
SPEC = [
    "--algorithm", "ppo", "--env", "gym:CartPole-v1", "--num-agents", "1", "--num-evals", "1",
    "--set", "session.checkpoint.period=5", "--set", "session.checkpoint.minIntervalSeconds=0",
    "--set", "evals.intervalSeconds=3", "--set", "session.metrics.agentIntervalSeconds=1",
    "--set", "session.metrics.learnerIntervalSeconds=1", "--set", "algorithm.batchSize=16",
    "--max-env-steps", str(BUDGET),
]  # fmt: skip


def sk(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SK, *args, "--root", str(root)], capture_output=True, text=True, timeout=120
    )


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 180.0) -> Any:
    """Poll `predicate` until it is truthy (the timeout only bounds a hung test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def state_of(folder: Path) -> dict[str, Any]:
    return read_json(folder / "state.json") or {}


def status_of(folder: Path, process: str) -> dict[str, Any]:
    return read_json(folder / "status" / f"{process}.json") or {}


def iteration(folder: Path) -> int:
    return int(status_of(folder, "learner").get("iteration") or 0)


def scalars(logdir: Path) -> dict[str, float]:
    """Every TensorBoard scalar of the run (over all its event-file folders): its largest value."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    best: dict[str, float] = {}
    for run, kinds in mux.Runs().items():
        for tag in kinds.get("scalars", []):
            values = [e.value for e in mux.Scalars(run, tag)]
            best[tag] = max([*values, best.get(tag, -np.inf)])
    return best


class Peer:
    """The stranger: ZeroMQ sockets of its own, closed at the end."""

    def __init__(self, addresses: dict[str, str]) -> None:
        self.addresses = addresses
        self.ctx = zmq.Context()
        self.socks: list[zmq.Socket[bytes]] = []

    def addr(self, name: str) -> str:
        return self.addresses[name]

    def sock(
        self, kind: int, name: str, connect: bool = True, **options: int | bytes
    ) -> zmq.Socket[bytes]:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 2000)  # what was sent gets there before close
        for key, value in options.items():
            s.setsockopt(getattr(zmq, key), value)
        if connect:
            s.connect(self.addr(name))
        self.socks.append(s)
        return s

    def close(self) -> None:
        for s in self.socks:
            s.close(0)
        self.ctx.term()


def header(kind: str, meta: dict[str, Any], arrays: list[list[Any]], v: Any = 1) -> bytes:
    return msgpack.packb({"v": v, "k": kind, "m": meta, "a": arrays}, use_bin_type=True)


def malformed(kind: str, meta: dict[str, Any]) -> list[list[bytes]]:
    """Messages of `kind` that no receiver may die of."""
    f4 = "<f4"
    return [
        [b"\xc1\xff garbage, not msgpack"],
        [msgpack.packb([1, 2, 3])],  # msgpack, not a map
        [header(kind, meta, [], v=99)],
        [header(kind, meta, [["x", f4, [2**40, 2**40]]]), b"\0" * 16],  # huge dims
        [header(kind, meta, [["x", f4, [-1, 4]]]), b"\0" * 16],  # negative
        [header(kind, meta, [["x", f4, [0, 2**62, 2**62]]]), b""],  # zero beside huge
        [header(kind, meta, [["x", f4, [4]], ["y", f4, [4]]]), b"\0" * 16],  # truncated
        [header(kind, meta, [["x", "|O", [1]]]), b"\0" * 8],  # object dtype
        [header(kind, meta, [["x", f4, [5]]]), b"\0" * 16],  # frame too short
        [header(kind, {"n": "x" * 100}, [["x", f4, [1]]]) + b"\xff", b"\0" * 4],
    ]


def real_items(folder: Path, count: int) -> dict[str, np.ndarray]:
    spec = load_experiment(folder / "config.yml").spec
    return item_layout(spec, *env_spaces(spec.env)).example(count, 1)


def attack_experience(peer: Peer, folder: Path) -> None:
    """Malformed, odd-shaped, old-schema, step-inflating and oversized experience."""
    push = peer.sock(zmq.PUSH, "replay-collector-0")
    for frames in malformed(wire.EXPERIENCE, {"n": 1}):
        push.send_multipart(frames)
    real = real_items(folder, 4)
    old_schema = {k: v for k, v in real.items() if k != "param_version"}
    odd = {"obs/low_dim": np.zeros((4, 3), np.float32), "param_version": np.zeros(4, np.int64)}
    inflate = {"src": "agents-0", "steps": 10**15, "x": 2, "n": 4}
    for meta, arrays in (
        ({"n": 4}, old_schema),
        ({"n": 4, "x": 2, "src": "stranger", "steps": 10**15}, odd),
        (inflate, odd),
        (inflate, {**real, "obs/low_dim": real["obs/low_dim"][:, :, :2].copy()}),
        ({"n": 3}, real),  # arrays that do not stack n items
    ):
        push.send_multipart(wire.encode(wire.EXPERIENCE, meta, arrays))
    # above what this spec's agents ever send: ZeroMQ hangs up on the sender
    big = peer.sock(zmq.PUSH, "replay-collector-0")
    big.send_multipart(
        wire.encode(wire.EXPERIENCE, {"n": 1}, {"obs/low_dim": np.zeros(64 << 20, np.uint8)})
    )


def attack_sampler(peer: Peer) -> None:
    """Malformed and forged sample requests, priorities for no shard, an oversized frame."""
    dealer = peer.sock(zmq.DEALER, "replay-sampler", ROUTING_ID=STRANGER)
    for frames in malformed(wire.SAMPLE, {"batch_size": 16}):
        dealer.send_multipart(frames)
    for meta in (
        {"batch_size": 10**9, "id": 1, "ttl": 3600.0},  # above any capacity
        {"batch_size": 16, "id": 2, "ttl": 3600.0, "version": 2**62, "max_lag": 0},
        {"batch_size": -5, "id": 3},
        {"batch_size": True, "id": 4},
    ):
        dealer.send_multipart(wire.encode(wire.SAMPLE, meta))
    idx = {"indices": np.arange(4), "priorities": np.ones(4)}
    dealer.send_multipart(wire.encode(wire.PRIORITIES, {"shard": 99}, idx))
    big = peer.sock(zmq.DEALER, "replay-sampler")
    big.send_multipart([b"\0" * (64 << 20)])


def fake_replay_shard(peer: Peer) -> int:
    """Join the sampler's backend as a shard, take requests and answer them with forged
    batches (a layout of its own, stats that claim 10**15 env steps); how many of the
    learner's it answered (the stranger's own forged requests may come its way too)."""
    shard = peer.sock(zmq.DEALER, "replay-sampler-backend")
    shard.send_multipart([READY, b"7"])
    shard.send_multipart([b"NONSENSE", b"x"])  # an envelope of no kind
    answered = 0
    deadline = time.monotonic() + 120
    while answered < 2 and time.monotonic() < deadline:
        if not shard.poll(500):
            continue
        frames = shard.recv_multipart()
        if len(frames) < 2 or frames[0] == b"":
            continue
        client, request = frames[0], wire.decode(frames[1:])
        meta = {"id": request.meta.get("id"), "shard": 0, "n": 16, "stats": {"steps": 10**15}}
        forged = {"obs": np.zeros((16, 3), np.float32)}
        shard.send_multipart([REPLY, client, *wire.encode(wire.BATCH, meta, forged)])
        if client != STRANGER:
            answered += 1
        shard.send_multipart([READY, b"7"])
    shard.send_multipart([REPLY, b"no-such-client", *wire.encode(wire.BATCH, {}, {})])
    return answered


def joined(peer: Peer, kind: int, name: str, timeout: float = 30.0) -> zmq.Socket[bytes]:
    """A socket of the peer's connected to `name`, once its ZMTP (CURVE) handshake is done."""
    from zmq.utils.monitor import recv_monitor_message

    sock = peer.sock(kind, name, connect=False)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        sock.connect(peer.addr(name))
        assert monitor.poll(int(timeout * 1000)), f"no handshake with {name}"
        recv_monitor_message(monitor)
    finally:
        sock.disable_monitor()
        monitor.close(0)
    return sock


def fake_parameter_server(peer: Peer, agent_pid: int) -> int:
    """Join the parameter server's backend as shards and serve forged parameters (a hash that
    does not match, or another model's with a matching one); how many fetchers it answered.

    The frontend deals fetches round-robin over its shards, so the stranger joins as three
    shards of the four and answers eight fetches: the agent fetches at every episode start (tens
    a second here), the eval once an evaluation, so most go to the agent, which must refuse
    them. ROUTERs, not REPs, so the envelope names the fetcher. The agent, held with SIGSTOP
    by the caller, goes on once the three are joined: it cannot take its whole step budget
    before they serve it, however fast it steps."""
    fakes = [joined(peer, zmq.ROUTER, "ps-backend") for _ in range(3)]
    os.kill(agent_pid, signal.SIGCONT)
    poller = zmq.Poller()
    for fake in fakes:
        poller.register(fake, zmq.POLLIN)
    answered = 0
    fetchers: set[bytes] = set()
    deadline = time.monotonic() + 120
    while answered < 8 and time.monotonic() < deadline:
        for fake, _ in poller.poll(500):
            frames = fake.recv_multipart()
            split = frames.index(b"")  # [frontend, fetcher..., b"", request...]
            envelope = frames[: split + 1]
            fetchers.add(b"/".join(envelope[1:split]))
            params = {"model/pi.weight": np.full((2, 4), 1e6, np.float32)}
            # a hash that does not match, or one that does over another model's parameters
            digest = content_hash(params) if answered % 2 else "0" * 24
            meta = {"iteration": 10**9, "hash": digest, "time": time.time(), "env_steps": 10**15}
            fake.send_multipart([*envelope, *wire.encode(wire.PARAMS, meta, params)])
            answered += 1
    return len(fetchers)


def attack_parameters(peer: Peer) -> None:
    """Malformed fetches to the parameter server, an oversized one, a subscribe storm."""
    for frames in malformed(wire.FETCH, {}):
        req = peer.sock(zmq.DEALER, "ps-serve")  # a DEALER may send what a REQ may not
        req.send_multipart([b"", *frames])
    big = peer.sock(zmq.DEALER, "ps-serve")
    big.send_multipart([b"", b"\0" * (4 << 20)])
    storm = [peer.sock(zmq.XSUB, "parameter-publish") for _ in range(20)]
    for _ in range(50):
        for s in storm:
            s.send(b"\x01")
            s.send(b"\x00")
    storm[0].send(b"\x02" * 4096)  # not a subscription, and above the bound


def attack_metrics_and_logs(peer: Peer) -> None:
    """Scalars and log records from names outside the topology, garbage, oversized frames."""
    for name in ("tensorplex", "loggerplex"):
        push = peer.sock(zmq.PUSH, name)
        for frames in malformed(wire.SCALARS if name == "tensorplex" else wire.LOG, {}):
            push.send_multipart(frames)
        push.send_multipart([b"\0" * (4 << 20)])
    push = peer.sock(zmq.PUSH, "tensorplex")
    for src, grp, idx in (("stranger", None, None), ("agents-0", "agents", 9)):
        meta = {"src": src, "grp": grp, "idx": idx, "step": 10**15, "t": time.time(),
                "vals": {"learner/finished": 1.0, "agent/env_steps": 1e15}}  # fmt: skip
        push.send_multipart([header(wire.SCALARS, meta, [])])
    push = peer.sock(zmq.PUSH, "loggerplex")
    for src in ("intruder", "../../etc/passwd"):
        meta = {"src": src, "lvl": "INFO", "t": time.time(), "name": "x", "msg": "hello"}
        push.send_multipart([header(wire.LOG, meta, [])])


def raw_garbage(addresses: dict[str, str]) -> None:
    """Bytes that are not even ZMTP, to every endpoint (TensorBoard's HTTP one included)."""
    for address in addresses.values():
        scheme, _, where = address.partition("://")
        if scheme == "ipc":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(where)
        else:
            host, _, port = where.rstrip("/").rpartition(":")
            s = socket.create_connection((host, int(port)), timeout=5)
        with s:
            s.sendall(b"\xff" * 9 + b"\x7f" + b"GET / HTTP/1.0\r\n\r\n" + b"\0" * 4096)


@pytest.fixture
def experiment(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "exps"
    res = sk("create", "exp-hostile", "--local", "--detach", *SPEC, root=root)
    assert res.returncode == 0, res.stderr
    folder = Path(res.stdout.strip())
    try:
        yield folder
    finally:
        sk("delete", "exp-hostile", "--keep-files", root=root)


def test_a_hostile_peer_cannot_crash_stall_or_end_a_running_experiment(experiment: Path) -> None:
    folder = experiment
    wait_for("the learner learning and the agent acting with its parameters", lambda: (
        iteration(folder) >= 2 and status_of(folder, "agents-0").get("param_version", -1) >= 1))  # fmt: skip
    before = state_of(folder)
    assert before["phase"] == "Running"
    pids = {name: p["pid"] for name, p in before["processes"].items()}
    addresses = before["addresses"]
    assert all(a.startswith("ipc://") for n, a in addresses.items() if n != "tensorboard")

    peer = Peer({k: v for k, v in addresses.items() if k != "tensorboard"})
    # CI's agent stepped CartPole at 8,700 steps/s and took its whole budget during the attacks
    # before the fake parameter server: it fetched no more, and only the eval met the forgeries.
    # So the agent is held (SIGSTOP; nothing local restarts a silent process) until the fake
    # server is joined, and its budget cannot run out first.
    os.kill(pids["agents-0"], signal.SIGSTOP)
    try:
        raw_garbage(addresses)
        attack_experience(peer, folder)
        attack_sampler(peer)
        attack_parameters(peer)
        attack_metrics_and_logs(peer)
        assert fake_parameter_server(peer, pids["agents-0"]) >= 1  # the agent fetched from it
        assert fake_replay_shard(peer) >= 1  # the learner's requests reached it
        attacked_at = iteration(folder)
    finally:
        os.kill(pids["agents-0"], signal.SIGCONT)
        peer.close()

    # the learner keeps learning, and nobody died or restarted
    wait_for("the learner iterating after the attack", lambda: iteration(folder) >= attacked_at + 3)
    during = state_of(folder)  # the run may be at its budget by now: the end is checked below
    assert during["phase"] in ("Running", "Stopping", "Succeeded"), during.get("reason")
    for name, proc in during["processes"].items():
        assert proc["restarts"] == 0 and proc["pid"] == pids[name], (name, proc)

    # the run ends normally at its budget, with its results
    wait_for("the run to end", lambda: state_of(folder).get("phase") in FINAL, timeout=600)
    final = state_of(folder)
    assert final["phase"] == "Succeeded", final.get("reason")
    assert final["reason"] == f"reached {BUDGET} env steps"
    assert final["env_steps"] == BUDGET
    assert all(p["restarts"] == 0 for p in final["processes"].values()), final["processes"]
    summary = json.loads((folder / "results" / "summary.json").read_text())
    assert summary["phase"] == "Succeeded" and summary["env_steps"] == BUDGET
    assert (folder / "results" / "learning_curve.png").stat().st_size > 5000

    # no forged step count got in: not the learner's, not its checkpoints', not the x axis
    learner = status_of(folder, "learner")
    assert learner["extra"]["global_env_steps"] <= 2 * BUDGET, learner["extra"]
    assert learner["iteration"] < 10**6 and learner["param_version"] < 10**6

    # every receiver counted what it dropped
    values = scalars(folder / "tensorboard")
    for tag in (
        "replay/rejected_messages",
        "replay_lb/rejected_messages",
        "ps/rejected_messages",
        "agent/rejected_messages",
        "tensorplex/rejected_messages",
        "learner/rejected_batches",
    ):
        assert values.get(tag, 0) > 0, (tag, sorted(values))
    assert values["learner/global_env_steps"] <= 2 * BUDGET
    assert (
        "dropped malformed message on loggerplex"
        in (folder / "logs" / "loggerplex.out").read_text()
    )
    logs = {p.name for p in (folder / "logs").iterdir()}
    assert not {n for n in logs if "intruder" in n or "passwd" in n or "stranger" in n}, logs
