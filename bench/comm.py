"""Benchmark of the comm layer against raw ZeroMQ moving the same bytes, in the same run.

    python bench/comm.py [--quick]

- experience: transitions/s from agent senders into the shards' buffers (the real replay service:
  `ReplayBalancer` and 2 `ReplayShard`s; each sender's PUSH socket balances over the shards'
  collectors), in batches of 256 transitions (obs 27 x float32, action 8 x float32, reward float32,
  done bool). Reference: the same senders PUSHing the same four arrays zero-copy straight to one
  PULL socket.
- sampling: batches/s of 512 transitions that the learner's `Prefetcher` delivers from 2 uniform
  shards through the sampling broker. Reference: a raw PUSH/PULL stream of the same batches.
- parameters: seconds from `publish` until 8 agent clients hold a new 1 MB parameter set (learner
  PUB -> ps shard -> ps proxy -> 8 `ParameterClient`s fetching by hash). Reference: raw PUB of the
  same megabyte to 8 SUB sockets.
- Closed to strangers (issue 25; goal: at most 10 % slower than the same path open to all):
  the experience, sampling and parameter paths again as a local run wires them, Unix sockets in
  the run's private folder (`launch/local/sockets.py`), and as pods talk, TCP with the
  experiment's keys: sealed messages on the experience and parameter paths (`comm.seal`), CURVE on
  the others (`comm.curve`) but the hops inside one pod (a service to its shards, on the pod's
  loopback), each against the same path on plain TCP in the same run.
  Those paths run flat out, far above what agents send; the main job shows the price where it
  runs: the agents' env steps/s of `make run`'s experiment (PPO Ant-v5, 2 agents, 1 eval,
  local) over a window after its first update as created (Unix sockets), against the same
  experiment wired as before them (every endpoint a 127.0.0.1 port, a key file in the folder:
  no command makes that, the benchmark does); and that TCP wiring with keys against the same
  without them, the price of the keys at the rates a run sends; runs alternated.

Every party runs in its own process (agents: 8 client threads in one process), as in a local
experiment. Writes bench/results/comm.json.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import Row, parse_args, print_table, write_results
from local import agents_steps, wait_learning

BATCH = 256
SAMPLE_BATCH = 512
SENDERS = 2
SHARDS = 2
AGENTS = 8
PARAM_BYTES = 1 << 20


def transitions(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """n transitions, stacked: what an agent of the bench's experiment (DDPG on the default
    HalfCheetah-v5: 17 observations, 6 actions) sends in one message. Shards take items of
    their experiment's layout only (runtime.layout); 180 bytes each, 44-byte stand-ins before."""
    rng = np.random.default_rng(seed)
    return {
        "obs/low_dim": rng.standard_normal((n, 17)).astype(np.float32),
        "next_obs/low_dim": rng.standard_normal((n, 17)).astype(np.float32),
        "actions": rng.standard_normal((n, 6)).astype(np.float32),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "terminals": (rng.random(n) < 0.01).astype(np.float32),
        "discounts": np.full(n, 0.97, np.float32),
        "param_version": np.zeros(n, np.int64),
    }


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TRANSPORTS = ("tcp", "curve", "ipc")
"""How `experiment_envs` wires the roles: plain TCP on 127.0.0.1; TCP with the experiment's
keys, as pods talk; Unix sockets in the run's folder, as a local run does."""


def experiment_envs(
    root: Path, spec: dict[str, Any], transport: str = "tcp"
) -> dict[str, dict[str, str]]:
    """The environment of every process of a throwaway experiment (as the local backend does),
    wired by `transport` (TRANSPORTS); with keys (`curve`), its key file in the folder, where
    the roles find it."""
    from surreal_kube.experiment.resolve import (
        deep_merge,
        default_document,
        dump_yaml,
        validate_document,
    )
    from surreal_kube.experiment.topology import build_topology

    doc = default_document("bench", "ddpg")
    deep_merge(doc, {"spec": spec})
    exp = validate_document(doc)
    config = root / "config.yml"
    config.write_text(dump_yaml(exp))
    if transport == "curve":
        from surreal_kube.launch.keys import write_keys

        write_keys(root)
    topo = build_topology("bench", exp.spec)
    from surreal_kube.launch.local.ports import allocate_ports

    ports = allocate_ports(sorted(topo.binders), set())  # distinct: free_port() may repeat
    if transport == "ipc":
        (root / "s").mkdir(mode=0o700)
        book = topo.addresses_local(ports, socket_dir=str(root / "s"))
    else:
        book = topo.addresses_local(ports)
    return {
        p.name: topo.environment(p, book, config_path=str(config), experiment_dir=str(root))
        for p in topo.processes
    }


# ------------------------------------------------------------------------------ worker processes


def _role(env: dict[str, str], role: str, index: int) -> Any:
    os.environ.update(env)
    from surreal_kube.runtime.context import RoleContext
    from surreal_kube.runtime.main import role_class

    ctx = RoleContext.from_env(role=role, index=index)
    ctx.install_curve()  # as runtime.main does: the folder's keys, if any
    return role_class(role)(ctx)


def _install_keys(key_file: str | None) -> None:
    """A sender's or agent's process: sealing and CURVE with the experiment's keys (None: plain)."""
    from surreal_kube.comm import curve

    curve.install_from(key_file)


def key_file(envs: dict[str, dict[str, str]]) -> str | None:
    """The experiment's key file, if `experiment_envs` wrote one."""
    path = Path(envs["learner"]["SURREAL_EXPERIMENT_DIR"]) / "curve.key"
    return str(path) if path.exists() else None


def run_balancer(env: dict[str, str], stop: Any) -> None:
    """The replay load balancer role (or the ps proxy), until `stop`."""
    role = _role(env, env["SURREAL_ROLE"], 0)
    threading.Thread(target=lambda: (stop.wait(), role.stop.set()), daemon=True).start()
    try:
        role.run()
    finally:
        role.close()


def run_shard(env: dict[str, str], ready: Any, window: Any, stop: Any, out: Any) -> None:
    """A replay shard: counts the transitions it stored inside the measurement window."""
    shard = _role(env, "replay-shard", int(env["SURREAL_INDEX"]))
    ready.put(shard.connected)
    start_items = None
    t0 = t1 = 0.0
    try:
        while not stop.is_set():
            shard.step(20)
            if start_items is None and window.is_set():
                start_items, t0 = shard.receiver.items, time.perf_counter()
        t1 = time.perf_counter()
        out.put((shard.receiver.items - (start_items or 0), t1 - t0, shard.server.served))
    finally:
        shard.close()


def run_ps_shard(env: dict[str, str], stop: Any, ready: Any) -> None:
    """A parameter-server shard role until `stop` (`ready` once it is made)."""
    role = _role(env, "ps-shard", int(env["SURREAL_INDEX"]))
    ready.put(True)
    threading.Thread(target=lambda: (stop.wait(), role.stop.set()), daemon=True).start()
    try:
        role.run()
    finally:
        role.close()


def collector_addresses(env: dict[str, str]) -> list[str]:
    """An agent's addresses of every replay shard's collector, in shard order."""
    from surreal_kube.experiment.topology import collector, endpoint

    return [env[endpoint(collector(i)).addr_var] for i in range(SHARDS)]


def run_sender(
    addr: str | list[str], raw: bool, ready: Any, stop: Any, seed: int, keys: str | None
) -> None:
    """An agent sending batches of BATCH transitions as fast as it can."""
    _install_keys(keys)
    batch = transitions(BATCH, seed)
    if raw:
        from surreal_kube.comm.sockets import make_socket

        sock = make_socket(zmq.PUSH, connect=addr, sndhwm=64)
        frames = list(batch.values())
        ready.put(True)
        while not stop.is_set():
            for _ in range(100):
                sock.send_multipart(frames, copy=False)
        sock.close(0)
        return
    from surreal_kube.comm.experience import ExperienceSender

    sender = ExperienceSender(addr, timeout=5.0)
    ready.put(True)
    while not stop.is_set():
        for _ in range(100):
            sender.send_stacked(batch, BATCH)
    sender.close()


def run_raw_receiver(addr: str, window: Any, stop: Any, out: Any) -> None:
    """The reference sink: PULL and count, zero-copy."""
    from surreal_kube.comm.sockets import make_socket

    sock = make_socket(zmq.PULL, bind=addr, rcvhwm=64)
    count, t0, started = 0, 0.0, False
    while not stop.is_set():
        if not sock.poll(20):
            continue
        sock.recv_multipart(copy=False)
        if not started and window.is_set():
            started, count, t0 = True, 0, time.perf_counter()
        count += BATCH if started else 0
    out.put((count, time.perf_counter() - t0))
    sock.close(0)


def run_raw_batch_pusher(addr: str, stop: Any) -> None:
    """The sampling reference: a stream of SAMPLE_BATCH-transition batches."""
    from surreal_kube.comm.sockets import make_socket

    sock = make_socket(zmq.PUSH, bind=addr, sndhwm=8)
    batch = transitions(SAMPLE_BATCH)
    frames = list(batch.values())
    while not stop.is_set():
        try:
            sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            sock.poll(20, zmq.POLLOUT)
    sock.close(0)


def run_agents(
    addr: str, raw: bool, rounds: int, ready: Any, go: Any, out: Any, keys: str | None
) -> None:
    """AGENTS clients (threads): for each new parameter set, the time the last one got it."""
    _install_keys(keys)
    from surreal_kube.comm.parameters import ParameterClient
    from surreal_kube.comm.sockets import make_socket

    got: list[list[float]] = [[] for _ in range(AGENTS)]

    def agent(i: int) -> None:
        if raw:
            sock = make_socket(zmq.SUB, connect=addr, rcvhwm=4)
            sock.setsockopt(zmq.SUBSCRIBE, b"")
            ready.put(i)
            while len(got[i]) < rounds:
                if sock.poll(200):
                    sock.recv_multipart(copy=False)
                    got[i].append(time.time())
            sock.close(0)
            return
        client = ParameterClient(addr, timeout=2.0)
        ready.put(i)
        held = None
        while len(got[i]) < rounds:
            if client.fetch() is not None and client.hash != held:
                held = client.hash
                got[i].append(time.time())
            else:
                time.sleep(0.001)  # an agent fetches between env steps, not in a hot loop
        client.close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(AGENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put([max(got[i][r] for i in range(AGENTS)) for r in range(rounds)])


# ------------------------------------------------------------------------------ measurements


def _spawn(ctx: Any, target: Any, *args: Any) -> Any:
    p = ctx.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def _join(procs: list[Any]) -> None:
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()


def _wait_shards(ready: Any) -> None:
    """Until every shard is up and connected to the load balancer (so both get experience)."""
    if not all(ready.get(timeout=120) for _ in range(SHARDS)):
        raise RuntimeError("a replay shard could not reach the load balancer")


def experience(mpc: Any, seconds: float, raw: bool, transport: str = "tcp") -> float:
    """Transitions per second into the shards (ours) or the raw PULL socket (reference)."""
    window, stop, out = mpc.Event(), mpc.Event(), mpc.Queue()
    procs = []
    keys = None
    with tempfile.TemporaryDirectory() as tmp:
        if raw:
            addr = f"tcp://127.0.0.1:{free_port()}"
            procs.append(_spawn(mpc, run_raw_receiver, addr, window, stop, out))
            expected = 1
        else:
            # the rate limiter off: this measures how fast shards take experience
            spec = {
                "replay": {
                    "shards": SHARDS,
                    "kind": "uniform",
                    "capacity": 200_000,
                    "samplesPerInsert": 0,
                }
            }
            envs = experiment_envs(Path(tmp), spec, transport)
            keys = key_file(envs)
            lb_stop = mpc.Event()
            procs.append(_spawn(mpc, run_balancer, envs["replay"], lb_stop))
            ready = mpc.Queue()
            for i in range(SHARDS):
                procs.append(
                    _spawn(mpc, run_shard, envs[f"replay-shard-{i}"], ready, window, stop, out)
                )
            _wait_shards(ready)
            addr = collector_addresses(envs["agents-0"])
            expected = SHARDS
        started = mpc.Queue()
        senders = [
            _spawn(mpc, run_sender, addr, raw, started, stop, s, keys) for s in range(SENDERS)
        ]
        for _ in range(SENDERS):
            started.get(timeout=120)
        time.sleep(0.5)  # warm-up
        window.set()
        time.sleep(seconds)
        stop.set()
        results = [out.get(timeout=30) for _ in range(expected)]
        _join(senders)
        if not raw:
            lb_stop.set()
        _join(procs)
    return sum(r[0] for r in results) / max(r[1] for r in results)


def sampling(mpc: Any, seconds: float, raw: bool, transport: str = "tcp") -> float:
    """Batches of SAMPLE_BATCH per second delivered to the learner side."""
    stop = mpc.Event()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        if raw:
            addr = f"tcp://127.0.0.1:{free_port()}"
            procs.append(_spawn(mpc, run_raw_batch_pusher, addr, stop))
            from surreal_kube.comm.sockets import make_socket

            sock = make_socket(zmq.PULL, connect=addr, rcvhwm=8)

            def get() -> None:
                sock.recv_multipart(copy=False)

        else:
            spec = {
                "replay": {
                    "shards": SHARDS,
                    "kind": "uniform",
                    "capacity": 100_000,
                    "startSampling": 3000,
                    "samplesPerInsert": 0,  # the rate limiter off: sampling as fast as it goes
                }
            }
            envs = experiment_envs(Path(tmp), spec, transport)
            _install_keys(key_file(envs))  # this process: the agent's sender, the learner's side
            window, out, lb_stop = mpc.Event(), mpc.Queue(), mpc.Event()
            procs.append(_spawn(mpc, run_balancer, envs["replay"], lb_stop))
            ready = mpc.Queue()
            shards = [
                _spawn(mpc, run_shard, envs[f"replay-shard-{i}"], ready, window, stop, out)
                for i in range(SHARDS)
            ]
            _wait_shards(ready)
            from surreal_kube.comm.experience import ExperienceSender
            from surreal_kube.comm.sampling import Prefetcher

            sender = ExperienceSender(collector_addresses(envs["agents-0"]), timeout=5.0)
            time.sleep(0.5)  # connected to both shards
            for s in range(40):  # 10,240 transitions, over both shards
                sender.send_stacked(transitions(BATCH, s), BATCH)
            time.sleep(0.5)  # delivered before the socket closes
            sender.close()
            prefetcher = Prefetcher(
                envs["learner"]["SURREAL_REPLAY_SAMPLER_ADDR"], SAMPLE_BATCH, depth=4
            )
            prefetcher.start()

            def get() -> None:
                assert prefetcher.get(timeout=30) is not None

        get()  # the first batch: everything is up
        for _ in range(20):
            get()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            get()
            n += 1
        rate = n / (time.perf_counter() - t0)
        stop.set()
        if raw:
            sock.close(0)
        else:
            prefetcher.close()
            _install_keys(None)
            for _ in shards:
                out.get(timeout=30)
            lb_stop.set()
            procs.extend(shards)
        _join(procs)
    return rate


def parameters(mpc: Any, rounds: int, raw: bool, transport: str = "tcp") -> float:
    """Median seconds from publish until all AGENTS hold the new parameters."""
    ready, out, stop = mpc.Queue(), mpc.Queue(), mpc.Event()
    procs = []
    keys = None
    with tempfile.TemporaryDirectory() as tmp:
        from surreal_kube.comm.parameters import ParameterPublisher

        if raw:
            from surreal_kube.comm.sockets import make_socket

            addr = f"tcp://127.0.0.1:{free_port()}"
            pub = make_socket(zmq.PUB, bind=addr, sndhwm=4)
            client_addr = addr
        else:
            envs = experiment_envs(Path(tmp), {"ps": {"shards": 1}}, transport)
            keys = key_file(envs)
            _install_keys(keys)  # this process is the learner: its publisher's socket
            publisher = ParameterPublisher(envs["learner"]["SURREAL_PARAMETER_PUBLISH_BIND"])
            procs.append(_spawn(mpc, run_balancer, envs["ps"], stop))
            procs.append(_spawn(mpc, run_ps_shard, envs["ps-shard-0"], stop, ready))
            # it makes the environment to size its sockets (runtime.layout): seconds for MuJoCo
            ready.get(timeout=120)
            client_addr = envs["agents-0"]["SURREAL_PS_SERVE_ADDR"]
        agents = _spawn(mpc, run_agents, client_addr, raw, rounds, ready, None, out, keys)
        for _ in range(AGENTS):
            ready.get(timeout=60)
        time.sleep(1.0)  # connections (and for ours: the ps shard's subscription)
        published = []
        for r in range(rounds):
            params = {"w": np.full(PARAM_BYTES // 4, r, np.float32)}
            published.append(time.time())
            if raw:
                pub.send_multipart([b"params", params["w"]], copy=False)
            else:
                publisher.publish(params, iteration=r, copy=False)
            time.sleep(0.3)
        arrived = out.get(timeout=60)
        agents.join(10)
        stop.set()
        if raw:
            pub.close(0)
        else:
            publisher.close()
            _install_keys(None)
        _join(procs)
    return statistics.median(a - p for a, p in zip(arrived, published, strict=True))


def best_of_transports(reps: int, measure: Any, better: str) -> dict[str, float]:
    """Ours by each of TRANSPORTS and the raw reference ("raw"), each the best of `reps` runs
    taken in turn."""
    runs: dict[str, list[float]] = {t: [] for t in (*TRANSPORTS, "raw")}
    for _ in range(reps):
        for transport in TRANSPORTS:
            runs[transport].append(measure(raw=False, transport=transport))
        runs["raw"].append(measure(raw=True, transport="tcp"))
    pick = max if better == "higher" else min
    return {t: pick(values) for t, values in runs.items()}


MAIN_JOB = ["--env", "gym:Ant-v5", "--num-agents", "2", "--num-evals", "1"]
TCP_CREATE = (
    "import sys\n"
    "from surreal_kube.launch.keys import write_keys\n"
    "from surreal_kube.launch.local import backend, sockets\n"
    "from surreal_kube.launch.local.ports import allocate_ports\n"
    "wiring = sys.argv.pop(1)\n"
    "def tcp(self, topology):  # every endpoint a 127.0.0.1 port, as pods talk\n"
    "    return topology.addresses_local(allocate_ports(sorted(topology.binders), set()))\n"
    "sockets.Wiring.addresses = tcp\n"
    "prepare = backend.prepare\n"
    "def keyed(*args, **kwargs):  # and the key file in the folder, where the roles find it\n"
    "    out = prepare(*args, **kwargs)\n"
    "    if wiring == 'curve':\n"
    "        write_keys(out[1].path)\n"
    "    return out\n"
    "backend.prepare = keyed\n"
    "from surreal_kube.cli.main import run\n"
    "sys.argv = ['surreal-kube', *sys.argv[1:]]\n"
    "run()\n"
)
"""A local run wired as pods talk: every endpoint a 127.0.0.1 port, with keys (`curve`, a key
file in the folder) or without (`tcp`). No command makes either: the benchmark patches the local
backend in a process of its own, where the supervisor then runs in the foreground."""
JOB_WIRINGS = ("ipc", "curve", "tcp")


def main_job_rate(wiring: str, window: float) -> float:
    """The agents' env steps/s of the main job over `window` s after the learner's first update,
    wired by `wiring` (JOB_WIRINGS): `ipc` as created (Unix sockets), else TCP_CREATE's."""
    root = Path(tempfile.mkdtemp(prefix="bench-comm-job-"))
    created = wiring == "ipc"
    create = ["-m", "surreal_kube.cli.main"] if created else ["-c", TCP_CREATE, wiring]
    args = ["create", "job", "--local", "--root", str(root), *MAIN_JOB]
    if created:
        args.append("--detach")
    proc = subprocess.Popen(
        [sys.executable, *create, *args, "--max-time", str(window + 120)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE if created else subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    if created and proc.wait(timeout=300):
        raise SystemExit(f"create failed: {proc.stderr.read() if proc.stderr else ''}")
    folder = root / "job"
    try:
        wait_learning(folder, 120)
        addresses = (json.loads((folder / "state.json").read_text()) or {})["addresses"]
        ipc = addresses["ps-serve"].startswith("ipc://")
        if ipc != created or (folder / "curve.key").exists() != (wiring == "curve"):
            raise SystemExit(f"the main job's run is not wired as asked ({wiring})")
        s0, t0 = agents_steps(folder)
        time.sleep(window)
        s1, t1 = agents_steps(folder)
        return (s1 - s0) / max(1e-6, t1 - t0)
    finally:
        subprocess.run(
            [sys.executable, "-m", "surreal_kube.cli.main", "delete", "job", "--root", str(root),
             "--yes"],
            capture_output=True, timeout=120,
        )  # fmt: skip
        proc.wait(timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def main_job(reps: int, window: float) -> dict[str, float]:
    """Mean env steps/s of each of JOB_WIRINGS, runs alternated so that a slower minute of the
    machine falls on all."""
    rates: dict[str, list[float]] = {w: [] for w in JOB_WIRINGS}
    for _ in range(reps):
        for wiring in JOB_WIRINGS:
            rates[wiring].append(main_job_rate(wiring, window))
    return {w: statistics.mean(r) for w, r in rates.items()}


def main() -> None:
    """Measure, print the table, write bench/results/comm.json."""
    args = parse_args(__doc__.splitlines()[0])
    seconds = 2.0 if args.quick else 8.0
    rounds = 5 if args.quick else 15
    reps = 1 if args.quick else 3
    mpc = mp.get_context("spawn")
    exp = best_of_transports(
        reps, lambda raw, transport: experience(mpc, seconds, raw, transport), "higher"
    )
    smp = best_of_transports(
        reps, lambda raw, transport: sampling(mpc, seconds, raw, transport), "higher"
    )
    par = best_of_transports(
        reps, lambda raw, transport: parameters(mpc, rounds, raw, transport), "lower"
    )
    job = main_job(1 if args.quick else 2, 20.0 if args.quick else 60.0)
    rows = [
        Row(
            f"experience: transitions/s from {SENDERS} senders into {SHARDS} shards",
            exp["tcp"],
            exp["raw"],
            "transitions/s",
            "higher",
        ),
        Row(
            f"sampling: batches of {SAMPLE_BATCH} delivered by the prefetcher",
            smp["tcp"],
            smp["raw"],
            "batches/s",
            "higher",
        ),
        Row(
            f"parameters: publish -> {AGENTS} agents hold 1 MB (median of {rounds})",
            par["tcp"],
            par["raw"],
            "s",
            "lower",
        ),
        Row(
            "experience on local Unix sockets (reference: the same path on plain TCP)",
            exp["ipc"],
            exp["tcp"],
            "transitions/s",
            "higher",
        ),
        Row(
            f"parameters on local Unix sockets: publish -> {AGENTS} agents hold 1 MB "
            "(reference: plain TCP)",
            par["ipc"],
            par["tcp"],
            "s",
            "lower",
        ),
        Row(
            f"sampling on local Unix sockets: batches of {SAMPLE_BATCH} (reference: plain TCP)",
            smp["ipc"],
            smp["tcp"],
            "batches/s",
            "higher",
        ),
        Row(
            "experience on TCP with keys (sealed), as pods talk (reference: plain TCP)",
            exp["curve"],
            exp["tcp"],
            "transitions/s",
            "higher",
        ),
        Row(
            f"parameters on TCP with keys (sealed): publish -> {AGENTS} agents hold 1 MB "
            "(reference: plain TCP)",
            par["curve"],
            par["tcp"],
            "s",
            "lower",
        ),
        Row(
            f"sampling on TCP with keys (CURVE): batches of {SAMPLE_BATCH} (reference: plain TCP)",
            smp["curve"],
            smp["tcp"],
            "batches/s",
            "higher",
        ),
        Row(
            "main job (PPO Ant-v5, 2 agents, local) env steps/s as created, Unix sockets "
            "(reference: TCP with keys, as before)",
            job["ipc"],
            job["curve"],
            "steps/s",
            "higher",
        ),
        Row(
            "main job (PPO Ant-v5, 2 agents) env steps/s on TCP with keys, as pods talk "
            "(reference: plain TCP)",
            job["curve"],
            job["tcp"],
            "steps/s",
            "higher",
        ),
    ]
    print_table("comm", rows)
    for label, (e, b, m) in {"local Unix sockets": rows[3:6], "TCP with keys": rows[6:9]}.items():
        print(
            f"{label}: experience {e.ratio:.2f}, 1 MB broadcast {b.ratio:.2f}, sampling "
            f"{m.ratio:.2f} of plain TCP (goal: >= 0.90)"
        )
    print(
        f"the main job as created steps at {rows[-2].ratio:.2f} of its speed wired as before; "
        f"with keys at {rows[-1].ratio:.2f} of plain TCP"
    )
    path = write_results("comm", rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
