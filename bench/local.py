"""Benchmark of the main job: a whole local experiment against one process, same machine, same run.

    python bench/local.py [--quick]

PPO on Ant-v5 (the main job, `make run`) with 2 agents and 1 eval, as local processes
(`create --local`): the env steps/s of the agents (measured from their progress files, after every
role is up: over a short window with --quick, over the rest of the 10-minute run in full), against
- the single-process trainer (`surreal_kube.rl.train`) with the same spec, and
- the raw environment's own limit on this machine: random actions, no policy, no learning, in one
  process per core, all at once (the ceiling of any number of agents here, issue 28), measured
  just before and just after the local run (their mean; both are in the details).
It also times the start-up, from `create --local` to the learner's first update, with the fork
server, with one interpreter per role, and for the single-process trainer. It also reports where
the agents' time goes (env, inference, experience hand-off, sockets) from
the agents' own timers, and where the machine's CPU goes over the window (each role's share, from
/proc: agents that step slower than the limit lose it to the learner, the evaluator and the rest).
In full mode both the local experiment and the single-process trainer train for 10 minutes
of wall-clock and the mean eval return after that is compared; the local run's learning curve is
printed. Writes bench/results/local.json.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (
    Row,
    local_run_active,
    parse_args,
    print_table,
    raw_env_limit,
    write_results,
)

ENV = "gym:Ant-v5"
SK = [sys.executable, "-m", "surreal_kube.cli.main"]


def single_process(seconds: float) -> tuple[float, float]:
    """(env steps/s, mean eval return) of the single-process trainer on the same spec."""
    from surreal_kube.experiment.resolve import resolve_experiment
    from surreal_kube.rl.train import train

    exp = resolve_experiment("bench-single", flags={"env.id": ENV, "agents.count": 2})
    result = train(exp.spec, max_seconds=seconds, eval_episodes=3)
    return result.env_steps_per_second, result.eval_mean_return


def agents_steps(folder: Path) -> tuple[int, float]:
    """Env steps the agents took so far, and when their newest status was written."""
    total, latest = 0, 0.0
    for path in folder.glob("status/agents-*.json"):
        data = json.loads(path.read_text())
        total += sum(int(v) for v in (data.get("env_steps_per_agent") or {}).values())
        latest = max(latest, float(data.get("updated_at") or 0.0))
    return total, latest


def wait_learning(folder: Path, timeout: float) -> None:
    """Until the learner has iterated (every role is up), at most `timeout` seconds."""
    learner = folder / "status" / "learner.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if learner.exists() and json.loads(learner.read_text()).get("iteration", 0) >= 1:
            return
        time.sleep(1)


def local_experiment(warmup_timeout: float, window: float, total: float | None) -> dict:
    """Run the local experiment detached; measure the steady rate over `window` seconds (and,
    with a `total` budget, over the whole run after start-up: `rate`, `window_rate`)."""
    root = Path(tempfile.mkdtemp(prefix="bench-local-"))
    budget = total if total else warmup_timeout + window + 30
    cmd = [
        *SK,
        "create",
        "bench-local",
        "--local",
        "--detach",
        "--root",
        str(root),
        "--env",
        ENV,
        "--num-agents",
        "2",
        "--num-evals",
        "1",
        "--max-time",
        str(budget),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if res.returncode:
        raise SystemExit(f"create failed: {res.stderr}")
    folder = Path(res.stdout.strip())
    out: dict = {"folder": str(folder)}
    try:
        wait_learning(folder, warmup_timeout)
        s0, t0 = agents_steps(folder)
        cpu0, wall0 = _role_cpu_seconds(folder), time.monotonic()
        time.sleep(window)
        s1, t1 = agents_steps(folder)
        cpu1, wall1 = _role_cpu_seconds(folder), time.monotonic()
        out["rate"] = (s1 - s0) / max(1e-6, t1 - t0)
        out["cpu_cores"] = {  # cores each role kept busy over the window
            role: round((cpu1[role] - cpu0.get(role, 0.0)) / (wall1 - wall0), 3)
            for role in sorted(cpu1)
        }
        splits = {}
        for path in folder.glob("status/agents-*.json"):
            data = json.loads(path.read_text())
            for k, v in (data.get("extra", {}).get("time_split") or {}).items():
                splits[k] = splits.get(k, 0.0) + float(v)
        out["time_split"] = splits
        if total:
            # the whole run after start-up, not its first minute: what the single-process
            # trainer's row and bench/learning.py's runs report too
            last = (s1, t1)
            while local_run_active(folder):
                last = max(last, agents_steps(folder))
                time.sleep(2)
            out["window_rate"] = out["rate"]
            out["rate"] = (last[0] - s0) / max(1e-6, last[1] - t0)
            summary = json.loads((folder / "results/summary.json").read_text())
            out["summary"] = summary
            from surreal_kube.session.results import load_curve

            out["curve"] = load_curve(folder / "results/curve.jsonl")  # in the run's time order
    finally:
        subprocess.run(
            [*SK, "delete", "bench-local", "--root", str(root), "--keep-files"],
            capture_output=True,
            timeout=120,
        )
        if not total:
            shutil.rmtree(root, ignore_errors=True)
    return out


_FIRST_UPDATE = re.compile(r"^(\S+ \S+) INFO learner \S+: first update done", re.M)


def _first_update_time(folder: Path, timeout: float) -> float | None:
    """Unix time of the learner's first update, from its log line; None after `timeout`."""
    deadline = time.time() + timeout
    path = folder / "logs" / "learner.out"
    while time.time() < deadline:
        found = _FIRST_UPDATE.search(path.read_text(errors="replace")) if path.exists() else None
        if found:
            stamp = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp()  # the log's local time, as time.time() counts
        time.sleep(0.1)
    return None


def _experiment_processes(folder: Path) -> list[Path]:
    """/proc entries of every live process of a local experiment: its roles and fork server
    carry SURREAL_EXPERIMENT_DIR in their environment, its supervisor daemon names the folder on
    its command line."""
    mark = f"SURREAL_EXPERIMENT_DIR={folder}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0") or (
                b"surreal_kube.launch.local.daemon" in (cmd := (proc / "cmdline").read_bytes())
                and str(folder).encode() in cmd
            ):
                found.append(proc)
        except OSError:
            continue
    return found


def _cpu_seconds(proc: Path) -> float:
    fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _role_cpu_seconds(folder: Path) -> dict[str, float]:
    """CPU seconds so far per role, summed over the role's processes (the fork server names
    each after its role: `agents-0`, `learner`, ...; `agents-0` and `agents-1` count as
    `agents`)."""
    out: dict[str, float] = {}
    for proc in _experiment_processes(folder):
        try:
            name = (proc / "comm").read_text().strip()
            seconds = _cpu_seconds(proc)
        except OSError:
            continue
        role = re.sub(r"-\d+$", "", name)
        out[role] = out.get(role, 0.0) + seconds
    return out


def _experiment_cpu_seconds(folder: Path) -> float:
    """CPU seconds (user + system) so far of every live process of a local experiment. CPU
    time, unlike wall time, does not depend on what else the (shared) machine runs."""
    total = 0.0
    for proc in _experiment_processes(folder):
        try:
            total += _cpu_seconds(proc)
        except OSError:
            continue
    return total


def local_startup(forkserver: bool, timeout: float = 300.0) -> tuple[float, float]:
    """(wall s, CPU s) from `create --local --detach` to the learner's first update."""
    root = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    env = dict(os.environ, SURREAL_KUBE_FORKSERVER="1" if forkserver else "0")
    args = ["--root", str(root)]
    cli_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    res = subprocess.run(
        [*SK, "create", "bench-startup", "--local", "--detach", *args, "--env", ENV,
         "--num-agents", "2", "--num-evals", "1", "--max-time", str(timeout)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    cli_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cli_cpu = sum(getattr(cli_after, k) - getattr(cli_before, k) for k in ("ru_utime", "ru_stime"))
    try:
        if res.returncode:
            raise SystemExit(f"create failed: {res.stderr}")
        folder = Path(res.stdout.strip())
        first = _first_update_time(folder, timeout)
        if first is None:
            raise SystemExit(f"no first update within {timeout:.0f} s")
        return first - start, cli_cpu + _experiment_cpu_seconds(folder)
    finally:
        subprocess.run([*SK, "delete", "bench-startup", *args, "--yes"], capture_output=True,
                       timeout=120, env=env)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


_SINGLE_FIRST_UPDATE = """
import sys, time
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.rl.train import train
exp = resolve_experiment("bench-single", flags={"env.id": sys.argv[1], "agents.count": 2})
first = []
def callback(steps, stats):
    first.append((time.time(), time.process_time()))
    return True
train(exp.spec, max_seconds=300, eval_episodes=1, callback=callback)
print(*first[0])
"""


def single_process_startup() -> tuple[float, float]:
    """(wall s, CPU s) from starting the single-process trainer to its first learner update."""
    start = time.time()
    res = subprocess.run(
        [sys.executable, "-c", _SINGLE_FIRST_UPDATE, ENV],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    wall, cpu = (float(x) for x in res.stdout.strip().splitlines()[-1].split())
    return wall - start, cpu


def startup_rows() -> list[Row]:
    """Start-up: `create --local` to the learner's first update (issue 15), two references.

    The fork server imports torch, gymnasium and MuJoCo once and forks the roles; the first
    reference starts each role as its own interpreter (the design before it), the second is the
    single-process trainer's first update on the same spec, interpreter start included. Wall
    time and the CPU time of every process involved: on a shared machine the wall time depends on
    the neighbours (eleven interpreters get eleven shares of a busy CPU, one fork server one).
    """
    forked = local_startup(forkserver=True)
    separate = local_startup(forkserver=False)
    single = single_process_startup()
    metric = "start-up, create --local to the learner's first update"
    rows = []
    for i, what in enumerate(("wall", "CPU")):
        rows += [
            Row(f"{metric} ({what}), vs one interpreter per role", forked[i], separate[i],
                "s", "lower"),
            Row(f"{metric} ({what}), vs the single-process trainer's", forked[i], single[i],
                "s", "lower"),
        ]  # fmt: skip
    return rows


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    quick = args.quick
    rows: list[Row] = startup_rows()
    cores = os.cpu_count() or 1
    single_rate, single_return = single_process(15.0 if quick else 600.0)
    # the limit just before and just after the local run, and their mean: a shared machine's
    # speed drifts within half an hour (8,177 steps/s measured before the single-process
    # trainer's 10 minutes, while the local run after them stepped 14 % slower than a day before)
    env_id, raw_seconds = ENV.split(":", 1)[1], 3.0 if quick else 10.0
    before = raw_env_limit(env_id, raw_seconds, cores)
    local = local_experiment(
        warmup_timeout=60.0 if quick else 120.0,
        window=10.0 if quick else 60.0,
        total=None if quick else 600.0,
    )
    after = raw_env_limit(env_id, raw_seconds, cores)
    limit = (before + after) / 2
    print(f"raw env limit: {before:,.0f} steps/s before the local run, {after:,.0f} after")
    rows.append(
        Row(
            "env steps/s: local experiment vs single-process trainer",
            local["rate"],
            single_rate,
            "steps/s",
            "higher",
        )
    )
    rows.append(
        Row(
            f"env steps/s: local experiment vs the raw env's limit ({cores} processes at once, "
            "before and after it)",
            local["rate"],
            limit,
            "steps/s",
            "higher",
        )
    )
    if "summary" in local:
        summary = local["summary"]
        rows.append(
            Row(
                "mean eval return (last 10 evals) after 10 min: local vs single-process",
                summary.get("recent_mean_return") or float("nan"),
                single_return,
                "return",
                "higher",
            )
        )
    print_table("local", rows)
    split = local.get("time_split") or {}
    if split:
        total = sum(split.values()) or 1.0
        print(
            "where the agents' time goes: "
            + ", ".join(
                f"{k} {100 * v / total:.0f}%"
                for k, v in sorted(split.items(), key=lambda kv: -kv[1])
            )
        )
    cores_used = local.get("cpu_cores") or {}
    if cores_used:
        print(
            f"where the {cores} cores go (busy cores per role over the window): "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores_used.items(), key=lambda x: -x[1]))
        )
    if local.get("curve"):
        print("learning curve (env steps, minutes, eval return):")
        for p in local["curve"]:
            print(f"  {p['env_steps']:>9,}  {p['wall_time'] / 60:5.1f}  {p['eval_return']:9.1f}")
        print(f"results: {local['folder']}/results")
    path = write_results("local", rows)
    extra = path.with_name("local.details.json")
    extra.write_text(
        json.dumps(
            {
                "time_split": split,
                "single_return": single_return,
                "raw_env_limit": limit,
                "raw_env_limit_before": before,
                "raw_env_limit_after": after,
                **{k: v for k, v in local.items() if k != "curve"},
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
