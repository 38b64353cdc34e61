"""Benchmark of learning: ours against fair peers over 3 seeds, and the single-process core.

    python bench/learning.py [--quick] [--gpu]

For HalfCheetah-v5 and Ant-v5, our single-process trainer (`surreal_kube.rl.train`) and SB3's PPO
each train for the same wall-clock budget (600 s each in full mode, a few seconds with --quick)
with matching settings: 64-64 tanh MLPs, Adam 3e-4, gamma 0.99, GAE lambda 0.95, clip 0.2 (our
adaptive clip range pinned to 0.2), 10 epochs, minibatches of about 64 steps from about 2048 steps
per update, gradient norm 0.5, initial log std 0, observations whitened by running statistics (our
ZFilter; SB3's VecNormalize with reward normalization off), one environment, one torch thread.

Rows:
- env steps/s over the whole training run (acting and learning), higher is better;
- return gain over a uniformly random policy after the budget: mean deterministic return over the
  evaluation episodes minus the random policy's mean return (measured in the same run), so that
  the ratio is meaningful for tasks whose raw returns start negative.

--gpu adds learner updates/s on CUDA against the CPU (all cores) for the same batches: PPO batches
of 64 and 512 sub-trajectories, DDPG batches of 512 and 4096 transitions. Without CUDA those rows
are skipped with a message.

--figures adds the protocol of issue 28 (`--figure` picks tasks): PPO Ant-v5, DDPG (TD3 options
as defaults) HalfCheetah-v5 and Ant-v5, each ours (a whole local experiment, `create --local`,
defaults: 2 agents, 1 eval) against its fair peer (SB3 as a user who knows it runs it on the same
cores: rl-zoo's PPO settings with 2 environment processes; TD3 with Gaussian noise 0.1 and our
3-step returns, 2 environment processes), the same wall clock (`--figure-budget`, 600 s), the
same estimator (the mean of the last 10 evaluations of 5 deterministic episodes, one every 10 s:
ours by its evaluator's snapshots, played while no agent waits for a CPU (on 2 cores: the
first at once, then one a minute, the rest when the agents stop; runtime/eval.py), the peer's
from policy snapshots after its run, so that evaluations take none of either's training time),
3 seeds each (`--seeds`), interleaved seed by seed. The table gives the medians; every run is
kept in bench/results/learning.details.json, and the docs page shows each seed, the median and
the range (`bench/report.py`). The earlier "8 agents vs 2" row is gone: on 2 cores both ran on
the same cores, so it scaled nothing. These need a quiet machine: on a shared one they measure
the neighbours. Writes bench/results/learning.json.

`--long 1800` runs only PPO Ant-v5 with defaults for 30 minutes (issue 28: no collapse): after
the first 10 minutes, the mean of the last 10 evaluations at the end and the lowest it fell to,
against the best it reached (rows added to learning.json, the others kept).

`--contender` picks who runs (ours, sb3, sample-factory; default ours and sb3); a contender left
out keeps its committed runs, and a row is always the medians of the runs the details hold, so
that the table and the seeds under it agree (stderr says when ours and a peer were not run
together, so not interleaved). `--contender sample-factory` adds Sample Factory's APPO (2.1.1,
its MuJoCo example's settings, 2 rollout workers of 8 environments) as a second peer of PPO
Ant-v5: it runs from a scratch venv made once under ~/.cache/surreal-kube/sample-factory (it pins
numpy below 2; torch, gymnasium and MuJoCo are ours), checkpoints every 10 s and has its last 10
evaluated after the run like SB3's snapshots (bench/peers/sf_peer.py). A benchmark reference
only, never a dependency.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import Row, local_run_active, print_table, raw_env_limit, utc_stamp, write_results

from surreal_kube.session.results import load_curve

ENVS = ("HalfCheetah-v5", "Ant-v5")
PPO_SETTINGS = {
    "gamma": 0.99,
    "lam": 0.95,
    "lrPolicy": 3e-4,
    "lrBaseline": 3e-4,
    "clipEpsilon": 0.2,
    "clipRange": [0.2, 0.2],
    "epochsPolicy": 10,
    "epochsBaseline": 10,
    "batchSize": 100,  # 100 windows x 20 owned steps = 2000 steps per update
    "minibatches": 32,  # ~3 windows, ~62 steps per minibatch
    "maxGradNorm": 0.5,
    "initLogSig": 0.0,
    "hiddenSizes": [64, 64],
}


def spec_for(env_id: str, seed: int = 0):
    """Our experiment spec with the matching settings."""
    from surreal_kube.experiment.spec import ExperimentSpec

    return ExperimentSpec.model_validate(
        {
            "algorithm": {"name": "ppo", **PPO_SETTINGS},
            "env": {"id": f"gym:{env_id}"},
            "agents": {"count": 1, "batch": 1},
            "replay": {"kind": "fifo", "capacity": 4096, "startSampling": 1},
            "session": {"seed": seed, "learnerDevice": "cpu"},
        }
    )


def run_ours(env_id: str, budget: float, episodes: int) -> tuple[float, float]:
    """(env steps/s, mean deterministic return) of our trainer after `budget` seconds."""
    from surreal_kube.rl.train import train

    result = train(spec_for(env_id), max_seconds=budget, eval_episodes=episodes, device="cpu")
    return result.env_steps_per_second, result.eval_mean_return


def run_sb3(env_id: str, budget: float, episodes: int) -> tuple[float, float]:
    """(env steps/s, mean deterministic return) of SB3 PPO after `budget` seconds."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    class Deadline(BaseCallback):
        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.seconds = seconds
            self.start = 0.0

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            return time.perf_counter() - self.start < self.seconds

    env = VecNormalize(
        DummyVecEnv([lambda: gym.make(env_id)]), norm_obs=True, norm_reward=False, gamma=0.99
    )
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=2048,
        batch_size=64,
        n_epochs=10,
        learning_rate=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        max_grad_norm=0.5,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "log_std_init": 0.0},
        device="cpu",
        seed=0,
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=10**9, callback=Deadline(budget))
    elapsed = time.perf_counter() - start
    steps = model.num_timesteps
    eval_env = VecNormalize(
        DummyVecEnv([lambda: gym.make(env_id)]), norm_obs=True, norm_reward=False, training=False
    )
    eval_env.obs_rms = env.obs_rms.copy()
    eval_env.seed(200_000)
    mean, _ = evaluate_policy(
        model, eval_env, n_eval_episodes=episodes, deterministic=True, warn=False
    )
    return steps / elapsed, float(mean)


def random_return(env_id: str, episodes: int) -> float:
    """Mean return of uniformly random actions (the zero point of the return rows)."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(0)
    total = []
    for episode in range(episodes):
        env.reset(seed=300_000 + episode)
        ret, done = 0.0, False
        while not done:
            _, r, terminated, truncated, _ = env.step(env.action_space.sample())
            ret += float(r)
            done = terminated or truncated
        total.append(ret)
    env.close()
    return float(np.mean(total))


def learner_updates_per_second(algorithm: str, batch: int, device: str, seconds: float) -> float:
    """Learner iterations/s on `device` for synthetic batches shaped like HalfCheetah's."""
    import gymnasium as gym

    from surreal_kube.experiment.algorithms import DDPGConfig, PPOConfig
    from surreal_kube.rl.ddpg import DDPGLearner
    from surreal_kube.rl.ppo import PPOLearner

    obs_space = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    rng = np.random.default_rng(0)
    f32 = np.float32
    if algorithm == "ppo":
        cfg = PPOConfig()
        learner = PPOLearner(cfg, obs_space, act_space, device, seed=0)
        h = cfg.horizon
        info = np.concatenate(
            [rng.normal(size=(batch, h, 6)), np.full((batch, h, 6), cfg.init_log_sig)], axis=-1
        )
        data = {
            "obs/low_dim": rng.normal(size=(batch, h, 17)).astype(f32),
            "bootstrap/low_dim": rng.normal(size=(batch, 17)).astype(f32),
            "actions": rng.normal(size=(batch, h, 6)).astype(f32),
            "rewards": rng.normal(size=(batch, h)).astype(f32),
            "terminals": np.zeros((batch, h), f32),
            "behaviour_logp": rng.normal(-5, 1, size=(batch, h)).astype(f32),
            "action_info": info.astype(f32),
            "mask": np.ones((batch, h), f32),
            "train_mask": np.concatenate(
                [np.ones((batch, cfg.stride)), np.zeros((batch, h - cfg.stride))], axis=1
            ).astype(f32),
        }
    else:
        learner = DDPGLearner(DDPGConfig(batch_size=batch), obs_space, act_space, device, seed=0)
        data = {
            "obs/low_dim": rng.normal(size=(batch, 17)).astype(f32),
            "next_obs/low_dim": rng.normal(size=(batch, 17)).astype(f32),
            "actions": rng.uniform(-1, 1, size=(batch, 6)).astype(f32),
            "rewards": rng.normal(size=batch).astype(f32),
            "terminals": np.zeros(batch, f32),
            "discounts": np.full(batch, 0.99**3, f32),
        }
    learner.learn(dict(data))  # warm-up (CUDA context, kernels, allocator)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        learner.learn(dict(data))
        n += 1
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return n / (time.perf_counter() - start)


def gpu_rows(quick: bool) -> list[Row]:
    """Learner updates/s, CUDA against CPU, or no rows (with a message) without CUDA."""
    if not torch.cuda.is_available():
        print("--gpu: no CUDA device visible; GPU rows skipped", file=sys.stderr)
        return []
    torch.set_num_threads(os.cpu_count() or 1)
    seconds = 2.0 if quick else 10.0
    rows = []
    for algorithm, batch in (("ppo", 64), ("ppo", 512), ("ddpg", 512), ("ddpg", 4096)):
        gpu = learner_updates_per_second(algorithm, batch, "cuda", seconds)
        cpu = learner_updates_per_second(algorithm, batch, "cpu", seconds)
        rows.append(
            Row(
                f"{algorithm} learner updates/s, batch {batch} (GPU vs CPU)",
                gpu,
                cpu,
                "updates/s",
                "higher",
            )
        )
    return rows


RESULTS = Path(__file__).resolve().parent / "results"
SK = [sys.executable, "-m", "surreal_kube.cli.main"]


def local_experiment(
    tag: str,
    env_id: str,
    algorithm: str,
    agents: int,
    seconds: float,
    sets: Sequence[str] = (),
    curve_as: str | None = None,
) -> dict[str, object]:
    """Run one local experiment to its time budget; its summary, with its curve's points (in
    the run's time order) under `curve`.

    sets: `--set KEY=VALUE` overrides (a variant of the defaults, to compare in one run);
    curve_as: copy its learning curve to bench/results/<curve_as>.png."""
    root = Path(tempfile.mkdtemp(prefix=f"bench-{tag}-"))
    name = f"bench-{tag}"
    cmd = [
        *SK,
        "create",
        name,
        "--local",
        "--detach",
        "--root",
        str(root),
        "--algorithm",
        algorithm,
        "--env",
        f"gym:{env_id}",
        "--num-agents",
        str(agents),
        "--num-evals",
        "1",
        "--max-time",
        str(seconds),
        *(arg for kv in sets for arg in ("--set", kv)),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if res.returncode:
        raise SystemExit(f"create {name} failed: {res.stderr.strip()}")
    folder = Path(res.stdout.strip().splitlines()[-1])
    try:
        deadline = time.time() + seconds + 600
        while time.time() < deadline:
            if not local_run_active(folder):
                break
            time.sleep(5)
        summary = json.loads((folder / "results" / "summary.json").read_text())
        summary["curve"] = load_curve(folder / "results" / "curve.jsonl")
        RESULTS.mkdir(parents=True, exist_ok=True)
        curve = folder / "results" / "learning_curve.png"
        if curve_as and curve.exists():
            shutil.copy(curve, RESULTS / f"{curve_as}.png")
    finally:
        subprocess.run([*SK, "delete", name, "--root", str(root)], capture_output=True, timeout=300)
        shutil.rmtree(root, ignore_errors=True)
    return summary


def health(summary: dict) -> str:
    """Policy lag and replay ratio of a run, one line."""
    lag = summary.get("policy_lag") or {}
    replay = summary.get("replay") or {}
    return (
        f"lag mean {lag.get('mean_all')}, p95 {lag.get('p95')}, bound {lag.get('bound')}; "
        f"samples/insert {replay.get('samples_per_insert')} "
        f"(target {replay.get('target_samples_per_insert')}); "
        f"stale {replay.get('stale_dropped')}, overwritten {replay.get('overwritten')}; "
        f"agents waited {summary.get('agents_replay_wait_seconds')} s; "
        f"env steps {summary.get('env_steps')}, iterations {summary.get('learner_iterations')}"
    )


PROTOCOL_SEEDS = (0, 1, 2)
EVAL_EVERY_SECONDS = 10.0  # our evals.intervalSeconds
EVAL_EPISODES = 5  # our evals.episodes
LAST_EVALS = 10  # our summary's recent_mean_return: the mean of the last 10 evaluations
TASKS = {  # figure: (algorithm, env)
    "ppo-ant": ("ppo", "Ant-v5"),
    "ddpg-halfcheetah": ("ddpg", "HalfCheetah-v5"),
    "ddpg-ant": ("ddpg", "Ant-v5"),
}
FIGURES = tuple(TASKS)
PEER_ENVS = 2
"""The peers' environment processes (SubprocVecEnv): the cores our 2 agents get."""


def _snapshots(seconds: float, vec_normalize: Any = None) -> Any:
    """An SB3 callback: stop at the wall-clock budget, and every EVAL_EVERY_SECONDS keep a copy
    of the policy (and the observation statistics) to evaluate after the run, as our evaluator
    keeps its snapshots until the CPUs are free: evaluations take none of the training time."""
    import copy

    from stable_baselines3.common.callbacks import BaseCallback

    class Snapshots(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.kept: list[tuple[dict, Any]] = []
            self.start = self.last = 0.0

        def _on_training_start(self) -> None:
            self.start = self.last = time.perf_counter()

        def _on_step(self) -> bool:
            now = time.perf_counter()
            if now - self.last >= EVAL_EVERY_SECONDS:
                self.last = now
                stats = copy.deepcopy(vec_normalize.obs_rms) if vec_normalize else None
                state = self.model.policy.state_dict()
                policy = {k: v.detach().clone() for k, v in state.items()}
                self.kept = [*self.kept[-(LAST_EVALS - 1) :], (policy, stats)]
            return now - self.start < seconds

    return Snapshots()


def _evaluate_snapshots(model: Any, env_id: str, kept: list, seed: int) -> float:
    """The mean over the kept snapshots of their mean deterministic return over EVAL_EPISODES."""
    import gymnasium as gym
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    means = []
    for policy, stats in kept:
        model.policy.load_state_dict(policy)
        env = DummyVecEnv([lambda: gym.make(env_id)])
        if stats is not None:
            env = VecNormalize(env, norm_obs=True, norm_reward=False, training=False)
            env.obs_rms = stats
        env.seed(200_000 + seed)
        mean, _ = evaluate_policy(
            model, env, n_eval_episodes=EVAL_EPISODES, deterministic=True, warn=False
        )
        means.append(float(mean))
        env.close()
    return float(np.mean(means)) if means else float("nan")


def run_peer(algorithm: str, env_id: str, budget: float, seed: int) -> dict[str, float]:
    """The fair peer of one task, one seed: SB3 as a user who knows it runs it on these cores.

    PPO: rl-zoo's MuJoCo entry (SB3's defaults with observations and rewards normalized),
    PEER_ENVS environment processes. TD3: Gaussian noise 0.1 and our n-step (3), rl-zoo's
    MuJoCo settings otherwise (400-300 networks, lr 1e-3, batch 256, learning starts 10,000),
    PEER_ENVS environment processes. One torch thread: the other cores step the environments.
    """
    import gymnasium as gym
    from stable_baselines3 import PPO, TD3
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize

    torch.set_num_threads(1)
    env = SubprocVecEnv([lambda: gym.make(env_id) for _ in range(PEER_ENVS)])
    env.seed(seed)
    norm = None
    if algorithm == "ppo":
        env = norm = VecNormalize(env, norm_obs=True, norm_reward=True, gamma=0.99)
        model = PPO("MlpPolicy", env, device="cpu", seed=seed, verbose=0)
    else:
        dim = env.action_space.shape[0]
        model = TD3(
            "MlpPolicy",
            env,
            learning_rate=1e-3,
            batch_size=256,
            learning_starts=10_000,
            n_steps=3,
            action_noise=NormalActionNoise(np.zeros(dim), 0.1 * np.ones(dim)),
            policy_kwargs={"net_arch": [400, 300]},
            device="cpu",
            seed=seed,
            verbose=0,
        )
    callback = _snapshots(budget, norm)
    start = time.perf_counter()
    model.learn(total_timesteps=10**9, callback=callback)
    elapsed = time.perf_counter() - start
    steps = model.num_timesteps
    env.close()
    return {
        "return": _evaluate_snapshots(model, env_id, callback.kept, seed),
        "env_steps_per_s": steps / elapsed,
        "evaluations": len(callback.kept),
    }


SAMPLE_FACTORY = (
    "sample-factory==2.1.1", "signal-slot-mp==1.0.5", "faster-fifo==1.5.2", "colorlog==6.12.0",
    "tensorboardx==2.6.5", "psutil==7.2.2", "threadpoolctl==3.8.0", "numpy==1.26.4",
)  # fmt: skip
"""Sample Factory and what it imports that this project's lock lacks (numpy: it pins < 2)."""
SAMPLE_FACTORY_HOME = Path.home() / ".cache" / "surreal-kube" / "sample-factory"
SAMPLE_FACTORY_WORKERS = 2  # rollout workers: one per core, as its docs advise
SAMPLE_FACTORY_ENVS = 8  # environments per worker: its MuJoCo example's


def sample_factory_python() -> str:
    """The interpreter of a scratch venv with Sample Factory, made once (pip's own settings).

    Everything else it needs (torch, gymnasium, MuJoCo) is this project's, seen through a .pth
    file: the same simulator and torch as ours, so that only the algorithm and its plumbing
    differ. Sample Factory is a reference for this benchmark only, never a dependency."""
    python = SAMPLE_FACTORY_HOME / "bin" / "python"
    ready = SAMPLE_FACTORY_HOME / ".installed"
    if ready.is_file() and ready.read_text() == " ".join(SAMPLE_FACTORY):
        return str(python)
    shutil.rmtree(SAMPLE_FACTORY_HOME, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(SAMPLE_FACTORY_HOME)], check=True)
    ours = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    theirs = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(theirs, "surreal_kube_venv.pth").write_text(ours + "\n")  # after its own packages
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", *SAMPLE_FACTORY], check=True
    )
    ready.write_text(" ".join(SAMPLE_FACTORY))
    return str(python)


def run_sample_factory(algorithm: str, env_id: str, budget: float, seed: int) -> dict[str, float]:
    """Sample Factory's APPO on one task, one seed, on the same cores and wall clock: its MuJoCo
    example's settings, a checkpoint every EVAL_EVERY_SECONDS, the last LAST_EVALS evaluated
    after the run (bench/peers/sf_peer.py), as the SB3 peer's snapshots are. Its env steps/s
    are counted to its last checkpoint (at most EVAL_EVERY_SECONDS before the end)."""
    if algorithm != "ppo":
        raise ValueError("Sample Factory is the reference for the on-policy task only")
    python = sample_factory_python()
    script = Path(__file__).resolve().parent / "peers" / "sf_peer.py"
    work = Path(tempfile.mkdtemp(prefix=f"bench-sf-{seed}-"))
    command = [python, str(script)]
    where = ["--env-id", env_id, "--train-dir", str(work), "--seed", str(seed)]
    proc: subprocess.Popen[bytes] | None = None
    try:
        with open(work / "train.log", "wb") as log:
            proc = subprocess.Popen(
                [*command, "train", *where,
                 "--num_workers", str(SAMPLE_FACTORY_WORKERS),
                 "--num_envs_per_worker", str(SAMPLE_FACTORY_ENVS),
                 "--save_every_sec", str(int(EVAL_EVERY_SECONDS)),
                 "--keep_checkpoints", str(LAST_EVALS)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            # its --train_for_seconds is never counted in 2.1.1, and its workers ignore SIGINT:
            # the clock is ours, and at the budget the whole group ends; checkpoints are
            # written to a temporary name and renamed, so none is left torn
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=budget)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        done = subprocess.run(
            [*command, "evaluate", *where, "--episodes", str(EVAL_EPISODES),
             "--last", str(LAST_EVALS)],
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if done.returncode:
            raise SystemExit(f"Sample Factory evaluation failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if not result["evaluations"]:
            log_tail = (work / "train.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"Sample Factory left no checkpoint; its log ends:\n{log_tail}")
    finally:
        if proc is not None:  # nothing of it outlives the run, whatever failed
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    return {
        "return": float(result["return"]),
        "env_steps_per_s": result["env_steps"] / budget,
        "evaluations": float(result["evaluations"]),
    }


def run_local(algorithm: str, env_id: str, budget: float, seed: int) -> dict[str, float]:
    """Ours on one task, one seed: the local experiment with its defaults (2 agents, 1 eval)."""
    task = f"{algorithm}-{env_id.split('-')[0].lower()}"
    tag = f"{task}-{seed}"
    summary = local_experiment(
        tag, env_id, algorithm, 2, budget, [f"session.seed={seed}"], task if seed == 0 else None
    )
    print(f"  {tag}: {health(summary)}", file=sys.stderr)
    return {
        "return": float(summary.get("recent_mean_return") or float("nan")),
        "env_steps_per_s": float(summary.get("env_steps_per_second") or 0.0),
        "evaluations": float(summary.get("evaluations") or 0),
    }


LONG_CHECKPOINT = 600.0
"""The protocol's budget: the long run's windows are those after it."""
COLLAPSE = 0.9
"""A long run holds if its last-10 mean at the end is at least this share of its best."""
LONG_DETAILS = RESULTS / "learning-long.details.json"
"""The long run's evaluations, to recompute or plot its windows."""


def last_ten_windows(points: Sequence[dict], after: float) -> list[float]:
    """The summary's estimator (the mean of the last 10 evaluations) at each evaluation of a
    snapshot taken after `after` seconds, over those evaluations only.

    Only those: on 2 cores a long run's evaluator keeps what a minute of playing drains, thinned
    in the older part (runtime/eval.py), so its first 10 minutes hold about one evaluation a
    minute, and a window reaching back into them would mix early policies into late ones (the
    last 10 evaluations before 10 min were those 10 minutes' whole curve, random start included:
    no reference for a window of the protocol)."""
    late = [float(p["eval_return"]) for p in points if float(p["wall_time"]) > after]
    return [float(np.mean(late[i - 9 : i + 1])) for i in range(9, len(late))]


def long_run_rows(seconds: float) -> list[Row]:
    """PPO Ant-v5 with defaults (seed 0) for `seconds` (issue 28: no collapse in a 30-minute
    run): after the protocol's 10 minutes, the last-10 mean at the end and the lowest it fell
    to, each against the best it reached, in the same run. Its evaluations are kept in
    bench/results/learning-long.details.json, its curve in ppo-ant-long.png."""
    raw = machine_rate("Ant-v5")
    summary = local_experiment(
        "ppo-ant-long", "Ant-v5", "ppo", 2, seconds, ["session.seed=0"], "ppo-ant-long"
    )
    points: list[dict] = summary["curve"]  # type: ignore[assignment]
    keep = ("wall_time", "env_steps", "eval_return", "eval_std", "param_version")
    LONG_DETAILS.write_text(
        json.dumps(
            {
                "budget_s": seconds,
                "raw_env_steps_per_s": raw,
                "points": [{k: p.get(k) for k in keep} for p in points],
            },
            indent=1,
        )
        + "\n"
    )
    windows = last_ten_windows(points, LONG_CHECKPOINT)
    if not windows:
        raise SystemExit(f"the long run has fewer than 10 evaluations after {LONG_CHECKPOINT} s")
    best, end, lowest = max(windows), windows[-1], min(windows)
    minutes = f"{seconds / 60:.0f} min"
    print(
        f"  ppo-ant long run: {len(points)} evaluations, {len(windows) + 9} after 10 min; "
        f"last-10 mean after 10 min: best {best:.0f}, lowest {lowest:.0f}, at {minutes} "
        f"{end:.0f}; {health(summary)}",
        file=sys.stderr,
    )
    goal = f"(no collapse: >= {COLLAPSE})"
    return [
        Row(
            f"PPO Ant-v5 last-10 mean at {minutes} vs its best after 10 min, same run {goal}",
            end,
            best,
            "return",
            "higher",
        ),
        Row(
            "PPO Ant-v5 lowest last-10 mean after 10 min vs its best, same run (dips)",
            lowest,
            best,
            "return",
            "higher",
        ),
    ]


CONTENDERS = ("ours", "sb3", "sample-factory")
"""Who the protocol runs: ours, SB3 (the fair peer of every task), Sample Factory (PPO only)."""
PEER_NAMES = {
    ("ppo", "sb3"): "SB3 PPO (rl-zoo)",
    ("ddpg", "sb3"): "SB3 TD3 (noise 0.1, 3-step)",
    ("ppo", "sample-factory"): "Sample Factory APPO (its MuJoCo example)",
}
WHO = {"ours": "ours", "sb3": "peer", "sample-factory": "sample-factory"}
"""How the details name each contender's runs (`peer` is SB3, as the first protocol wrote it)."""


RAW_SECONDS = 5.0
"""How long the bare environments step before each run to measure the machine's speed."""


def machine_rate(env_id: str) -> float:
    """The bare environment's steps/s on all cores at once, just before a run: a return within a
    wall-clock budget depends on how fast the machine steps that hour (this shared host has
    stepped Ant-v5 anywhere from 2,700 to 4,300 times a second per core on different days),
    so each run keeps the figure that says which hour it had."""
    return raw_env_limit(env_id, RAW_SECONDS, os.cpu_count() or 1)


def protocol_runs(
    budget: float, seeds: Sequence[int], tasks: Sequence[str], contenders: Sequence[str]
) -> list[dict]:
    """The protocol of issue 28: each task, ours and its fair peers, same cores, same wall
    clock, same evaluation estimator, `seeds` each, interleaved (seed by seed, ours then the
    peers), so that a slower hour of the machine falls on all. Sample Factory runs the on-policy
    task only. Each run is stamped with its date and with the machine's speed just before it
    (`raw_env_steps_per_s`, see `machine_rate`)."""
    run_of = {"ours": run_local, "sb3": run_peer, "sample-factory": run_sample_factory}
    runs: list[dict] = []
    for seed in seeds:
        for task in tasks:
            algorithm, env_id = TASKS[task]
            for who in contenders:
                if (algorithm, who) not in PEER_NAMES and who != "ours":
                    continue
                raw = machine_rate(env_id)
                result = run_of[who](algorithm, env_id, budget, seed)
                runs.append(
                    {
                        "task": task,
                        "who": WHO[who],
                        "seed": seed,
                        **result,
                        "raw_env_steps_per_s": raw,
                        "date": utc_stamp(),
                    }
                )
                print(f"  {task} seed {seed} {who}: {result}", file=sys.stderr)
    return runs


def merge_runs(kept: dict, new: Sequence[dict], budget: float) -> list[dict]:
    """The details after a protocol run: a new run replaces the kept one of its task, contender
    and seed; every other kept run stays (a run of one task or one peer keeps the rest). Kept
    runs of another budget (a --quick run's 60 s) are not comparable: none of them stays."""
    if kept.get("budget_s") != budget:
        return list(new)
    fresh = {(r["task"], r["who"], r["seed"]) for r in new}
    runs = kept.get("runs") or []
    return [r for r in runs if (r["task"], r["who"], r["seed"]) not in fresh] + list(new)


def protocol_rows(
    runs: Sequence[dict], new: Sequence[dict], budget: float, seeds: int
) -> list[Row]:
    """The rows of every task run now: each peer's median against ours', both from `runs` (the
    merged details), so that a row and the seeds the docs show under it always agree; a row
    neither side of which ran now is left as committed. Where ours and a peer were not both run
    now, stderr says so: those runs were not interleaved."""
    rows = []
    for task in dict.fromkeys(r["task"] for r in new):
        algorithm, env_id = TASKS[task]
        ours = [r["return"] for r in runs if r["task"] == task and r["who"] == "ours"]
        now = {r["who"] for r in new if r["task"] == task}
        for contender, who in WHO.items():
            values = [r["return"] for r in runs if r["task"] == task and r["who"] == who]
            if not values:
                continue
            print(
                f"{task} {contender}: median {np.median(values):.0f}, range "
                f"{min(values):.0f} to {max(values):.0f} over {len(values)} seeds",
                file=sys.stderr,
            )
            if contender == "ours" or not ours or not {"ours", who} & now:
                continue  # neither side run now: its committed row (and date) stays
            if {"ours", who} - now:
                print(f"{task}: ours and {contender} were not run together", file=sys.stderr)
            rows.append(
                Row(
                    f"{algorithm.upper()} {env_id} return, median of {seeds} seeds (last "
                    f"{LAST_EVALS} evals of {EVAL_EPISODES}), {budget:.0f} s, vs "
                    f"{PEER_NAMES[(algorithm, contender)]}",
                    float(np.median(ours)),
                    float(np.median(values)),
                    "return",
                    "higher",
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short run, under a minute")
    parser.add_argument("--gpu", action="store_true", help="also learner updates/s, GPU vs CPU")
    parser.add_argument(
        "--budget", type=float, help="seconds per training run (overrides the mode)"
    )
    parser.add_argument("--episodes", type=int, help="evaluation episodes (overrides the mode)")
    parser.add_argument(
        "--figures", action="store_true", help="also the 3-seed protocol of issue 28"
    )
    parser.add_argument(
        "--only-figures", action="store_true", help="the protocol only (skip the other rows)"
    )
    parser.add_argument(
        "--figure-budget", type=float, help="seconds per run of the protocol (600; quick 60)"
    )
    parser.add_argument(
        "--figure",
        action="append",
        choices=FIGURES,
        help="only this task (repeatable; default: all of them)",
    )
    parser.add_argument(
        "--seeds", type=int, default=len(PROTOCOL_SEEDS), help="seeds per task (3; quick 1)"
    )
    parser.add_argument(
        "--long",
        type=float,
        metavar="SECONDS",
        help="only the long run: PPO Ant-v5 with defaults for SECONDS (1800: issue 28's "
        "30 minutes), its last-10 mean at the end and its lowest against its best",
    )
    parser.add_argument(
        "--contender",
        action="append",
        choices=CONTENDERS,
        help="who the protocol runs (repeatable; default: ours and sb3); sample-factory runs "
        "PPO Ant-v5 only, from a scratch venv. A contender left out keeps its committed runs",
    )
    args = parser.parse_args()
    if args.long is not None:
        if args.long <= LONG_CHECKPOINT:
            parser.error(f"--long {args.long:g}: a long run goes past {LONG_CHECKPOINT:.0f} s")
        rows = long_run_rows(args.long)
        print_table("learning", rows)
        print(f"wrote {write_results('learning', rows, keep_others=True)}")
        return
    budget = args.budget or (5.0 if args.quick else 600.0)
    episodes = args.episodes or (2 if args.quick else 10)
    torch.set_num_threads(1)
    rows: list[Row] = []
    for env_id in () if args.only_figures else ENVS:
        base = random_return(env_id, episodes)
        ours_sps, ours_ret = run_ours(env_id, budget, episodes)
        ref_sps, ref_ret = run_sb3(env_id, budget, episodes)
        label = f"{budget:.0f} s"
        rows.append(
            Row(f"{env_id} PPO env steps/s (vs SB3)", ours_sps, ref_sps, "steps/s", "higher")
        )
        rows.append(
            Row(
                f"{env_id} PPO return gain over random @ {label} (vs SB3)",
                ours_ret - base,
                ref_ret - base,
                "return",
                "higher",
            )
        )
        print(
            f"{env_id}: random {base:.1f}, ours {ours_ret:.1f}, SB3 {ref_ret:.1f} (mean return)",
            file=sys.stderr,
        )
    if args.gpu:
        rows += gpu_rows(args.quick)
    details = RESULTS / "learning.details.json"
    if args.figures or args.only_figures:
        figure_budget = args.figure_budget or (60.0 if args.quick else 600.0)
        seeds = range(1 if args.quick else args.seeds)
        contenders = args.contender or ["ours", "sb3"]
        tasks = args.figure or FIGURES
        if not any(
            c == "ours" or (TASKS[t][0], c) in PEER_NAMES for c in contenders for t in tasks
        ):
            parser.error(
                f"--contender {' '.join(contenders)} runs none of {', '.join(tasks)}: "
                "sample-factory runs ppo-ant only"
            )
        new = protocol_runs(figure_budget, list(seeds), tasks, contenders)
        kept = json.loads(details.read_text()) if details.is_file() else {}
        runs = merge_runs(kept, new, figure_budget)
        rows += protocol_rows(runs, new, figure_budget, len(seeds))
    print_table("learning", rows)
    # the protocol alone keeps the committed rows it did not measure again
    path = write_results("learning", rows, keep_others=args.only_figures)
    if args.figures or args.only_figures:
        details.write_text(json.dumps({"budget_s": figure_budget, "runs": runs}, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
