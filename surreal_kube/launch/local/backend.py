"""Local experiments as a backend: create, list, status, logs, tb and delete by name.

Everything an operation needs is in the experiment folder (config, state file with the run's
socket folder, ports and pids, status files, logs), so a detached experiment is managed exactly
like a foreground one.
Pre-flight checks run before anything is written or started; a refused create leaves nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.resolve import dump_yaml, load_experiment_file
from surreal_kube.experiment.spec import Experiment
from surreal_kube.launch.keys import KEY_FILE
from surreal_kube.launch.local import orphans
from surreal_kube.launch.local.folder import (
    ExperimentFolder,
    default_root,
    private_files,
    read_json,
    write_json_atomic,
)
from surreal_kube.launch.local.ports import (
    allocate_ports,
    port_is_free,
    ports_in_use_by_experiments,
    root_lock,
)
from surreal_kube.launch.local.sockets import Wiring, remove_earlier_runs

ACTIVE = ("Starting", "Running", "Stopping")


def pid_alive(pid: int | None) -> bool:
    """True when a process with this pid exists (and is not a zombie we own)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


@dataclass
class LocalExperiment:
    """A local experiment found by name."""

    folder: ExperimentFolder
    state: dict[str, Any]

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def running(self) -> bool:
        """Its supervisor is alive and says so."""
        return self.state.get("phase") in ACTIVE and pid_alive(self.state.get("supervisor_pid"))

    @property
    def phase(self) -> str:
        phase = str(self.state.get("phase", "Unknown"))
        if phase in ACTIVE and not self.running:
            return "Lost"  # the supervisor died without writing a final phase
        return phase


def find(name: str, root: Path | None = None) -> LocalExperiment:
    """The local experiment `name`; LaunchError when there is none."""
    folder = ExperimentFolder.of(name, root)
    if not folder.exists():
        raise LaunchError(f"no local experiment named {name!r} under {folder.path.parent}")
    return _load(folder)


def _load(folder: ExperimentFolder) -> LocalExperiment:
    """An experiment as it stands: a dead supervisor's stale state is replaced by what runs now."""
    found = LocalExperiment(folder, read_json(folder.state) or {})
    if found.phase == "Lost":
        found.state = orphans.lost_view(folder.path, found.state)
    return found


def list_experiments(root: Path | None = None) -> list[LocalExperiment]:
    """Every local experiment under the root, by name."""
    base = (root or default_root()).expanduser()
    found = []
    for config in sorted(base.glob("*/config.yml")):
        found.append(_load(ExperimentFolder(config.parent.resolve())))
    return found


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) or 1


def pack_agents(count: int, cores: int) -> int:
    """Agents per process when the spec leaves `agents.batch` unset: the fewest that keep the
    agent processes within `cores` (the process count must divide `count`).

    More agent processes than cores only add contention: on 2 cores, 8 agents as 8 processes
    made the PPO learner wait for experience that aged past the policy-lag bound (more lag, many
    more items dropped as stale, fewer learner iterations), while 2 processes of 4 kept up with 2
    agents (`bench/learning.py --figure scale-out`). On Kubernetes each pod has cores of its
    own: one agent a pod.
    """
    processes = max(p for p in range(1, min(count, max(1, cores)) + 1) if count % p == 0)
    return count // processes


def with_agent_batch(exp: Experiment, cores: int) -> Experiment:
    """The experiment with `agents.batch` filled in for this machine (unchanged when set)."""
    agents = exp.spec.agents
    if agents.batch is not None:
        return exp
    packed = agents.model_copy(update={"batch": pack_agents(agents.count, cores)})
    return exp.model_copy(update={"spec": exp.spec.model_copy(update={"agents": packed})})


def preflight(exp: Experiment) -> None:
    """Checks that need no process: the environment exists and can be built here."""
    from surreal_kube.envs import check_env  # lazy: gymnasium and MuJoCo are heavy

    check_env(exp.spec.env)


def prepare(
    exp: Experiment,
    *,
    root: Path | None = None,
    resume: bool = False,
    replace: bool = False,
    restore_from: Path | None = None,
) -> tuple[Experiment, ExperimentFolder, Wiring, float]:
    """Reserve the name, write the folder and choose the run's sockets and ports; returns what
    the supervisor needs.

    With `resume`, the experiment's saved config is used (only the session budget comes from the
    command line) and the wall time of earlier runs is carried over.
    """
    folder = ExperimentFolder.of(exp.metadata.name, root)
    if restore_from is not None and not Path(restore_from).is_file():
        raise SpecError(f"--restore-from: checkpoint {str(restore_from)!r} does not exist")
    with root_lock(folder.path.parent):
        elapsed_before = 0.0
        remove_old = False
        earlier: dict[str, Any] = {}
        if folder.exists():
            existing = LocalExperiment(folder, read_json(folder.state) or {})
            earlier = existing.state
            if existing.running:
                raise LaunchError(
                    f"experiment {exp.metadata.name!r} is already running "
                    f"(supervisor pid {existing.state.get('supervisor_pid')}); "
                    f"`surreal-kube delete {exp.metadata.name}` stops it"
                )
            if existing.phase == "Lost" and (resume or replace):
                orphans.stop_leftovers(folder.path, existing.state)  # adopt nothing half-alive
            if resume:
                saved = load_experiment_file(folder.config)
                session = saved.spec.session.model_copy(
                    update={
                        "max_env_steps": exp.spec.session.max_env_steps,
                        "max_time_seconds": exp.spec.session.max_time_seconds,
                    }
                )
                exp = saved.model_copy(
                    update={"spec": saved.spec.model_copy(update={"session": session})}
                )
                elapsed_before = float(existing.state.get("elapsed") or 0.0)
                _check_budget_left(exp, folder, elapsed_before)
            elif replace:
                remove_old = True
            else:
                raise SpecError(
                    f"experiment name {exp.metadata.name!r} is already in use at {folder.path}; "
                    "use --resume to continue it, --replace to start over, or another name"
                )
        elif resume:
            raise SpecError(f"--resume: no experiment named {exp.metadata.name!r} at {folder.path}")
        exp = with_agent_batch(exp, available_cores())
        preflight(exp)  # the experiment that will run (the saved one when resuming)
        wiring = Wiring.plan(
            folder.path, exp.topology, ports_in_use_by_experiments(folder.path.parent)
        )
        if remove_old:  # only now: a refused create leaves the old experiment as it was
            shutil.rmtree(folder.path)
        with private_files():  # the folder 0700, its files 0600 (folder.PRIVATE_UMASK)
            folder.create()
            remove_earlier_runs(folder.path, earlier)
            # a key file of an earlier version's run would make the roles CURVE over Unix
            # sockets, paying per frame for nothing (launch/local/sockets.py)
            (folder.path / KEY_FILE).unlink(missing_ok=True)
            wiring.create()
            folder.config.write_text(dump_yaml(exp))
            if restore_from is not None:
                target = folder.checkpoints / Path(restore_from).name
                if Path(restore_from).resolve() != target.resolve():
                    shutil.copyfile(restore_from, target)  # not copy2: its mode may be open
            write_json_atomic(
                folder.state,
                {
                    "name": exp.metadata.name,
                    "phase": "Starting",
                    **wiring.state(),
                    "elapsed": elapsed_before,
                },
            )
    return exp, folder, wiring, elapsed_before


def _check_budget_left(exp: Experiment, folder: ExperimentFolder, elapsed: float) -> None:
    """A resumed run must have some budget left, or it would end the moment it starts."""
    from surreal_kube.launch.local.progress import read_progress

    session = exp.spec.session
    steps = read_progress(folder.status).env_steps
    if session.max_env_steps is not None and steps >= session.max_env_steps:
        raise SpecError(
            f"--resume: {exp.metadata.name} already took {steps} env steps, at or over "
            f"--max-env-steps {session.max_env_steps}; give a larger budget"
        )
    if session.max_time_seconds is not None and elapsed >= session.max_time_seconds:
        raise SpecError(
            f"--resume: {exp.metadata.name} already ran {elapsed:.0f} s, at or over "
            f"--max-time {session.max_time_seconds:g}; give a larger budget"
        )


def start_detached(folder: ExperimentFolder, timeout: float = 30.0) -> int:
    """Start the supervisor as a daemon; returns its pid once it reports Running."""
    with private_files():
        log = open(folder.logs / "supervisor.log", "ab")  # noqa: SIM115 - handed to the daemon
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "surreal_kube.launch.local.daemon", str(folder.path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_json(folder.state) or {}
        if state.get("supervisor_pid") == proc.pid and state.get("phase") in ("Running", "Failed"):
            return proc.pid
        if proc.poll() is not None:
            raise LaunchError(
                f"the supervisor exited at start (code {proc.returncode}); "
                f"see {folder.logs / 'supervisor.log'}"
            )
        time.sleep(0.1)
    raise LaunchError(f"the supervisor did not report Running in {timeout:.0f}s; see {folder.logs}")


def stop(exp: LocalExperiment, timeout: float = 60.0) -> None:
    """Stop a running experiment (its supervisor stops its children) and wait."""
    pid = exp.state.get("supervisor_pid")
    if exp.running and pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.2)
    # children left behind by a supervisor that died (or did not stop in time)
    for info in (exp.state.get("processes") or {}).values():
        child = info.get("pid")
        if child and pid_alive(child):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child, signal.SIGKILL)
    if pid and pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    _stop_tensorboard(exp.folder)


def results_of(exp: LocalExperiment) -> str:
    """What deleting the folder would throw away, in words ('' when nothing of value).

    Results, checkpoints and TensorBoard events are what a person would miss; config, logs and
    state files alone are not worth a question.
    """
    folder = exp.folder
    kinds = [
        ("results", folder.path / "results"),
        ("checkpoints", folder.path / "checkpoints"),
        ("TensorBoard events", folder.path / "tensorboard"),
    ]
    found: list[str] = []
    total = 0
    for label, path in kinds:
        files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else []
        if files:
            found.append(label)
            total += sum(f.stat().st_size for f in files)
    if not found:
        return ""
    words = ", ".join(found[:-1]) + (" and " if len(found) > 1 else "") + found[-1]
    return f"its {words} ({_size(total)})"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def delete(
    name: str,
    root: Path | None = None,
    keep_files: bool = False,
    progress: Callable[[str], None] | None = None,
) -> LocalExperiment:
    """Stop the experiment and remove its folder (unless `keep_files`), saying what it does.

    Stopping a running experiment can take a while (a final evaluation, checkpoints being
    written): `progress` hears each step, so the person waiting knows why.
    """
    say = progress or (lambda _message: None)
    exp = find(name, root)
    pid = exp.state.get("supervisor_pid")
    if exp.running:
        say(f"stopping {name} (supervisor pid {pid}); its processes finish their work first...")
    stop(exp)
    remove_earlier_runs(exp.folder.path, exp.state)  # the sockets a killed supervisor left
    if not keep_files:
        say(f"removing {exp.folder.path}")
        with root_lock(exp.folder.path.parent):
            shutil.rmtree(exp.folder.path)
    return exp


def log_file(exp: LocalExperiment, target: str) -> Path:
    """The log of `ROLE`, `ROLE/INDEX` or a process name: loggerplex's file, else raw output."""
    state_procs = exp.state.get("processes") or {}
    topo = load_experiment_file(exp.folder.config).topology
    names = [p.name for p in topo.processes]
    role, _, index = target.partition("/")
    candidates = [target] if target in names else []
    if not candidates:
        candidates = [
            p.name
            for p in topo.processes
            if (p.role == role or p.group == role) and (not index or str(p.index) == index)
        ]
    if not candidates:
        raise SpecError(
            f"no process {target!r} in {exp.name}; valid: {', '.join(names)} "
            "(or ROLE/INDEX such as agents/0)"
        )
    name = candidates[0]
    for path in (exp.folder.logs / f"{name}.log", exp.folder.logs / f"{name}.out"):
        if path.is_file():
            return path
    if name not in state_procs:
        raise LaunchError(f"{name} of {exp.name} has not started yet; no log")
    raise LaunchError(f"{name} of {exp.name} has written no log yet")


def tensorboard(exp: LocalExperiment, port: int | None = None) -> str:
    """URL of the experiment's TensorBoard: the running one, else one started on its folder."""
    if exp.running and not port:
        tb_port = (exp.state.get("ports") or {}).get("tensorboard")
        if tb_port and not port_is_free(int(tb_port)):
            return f"http://127.0.0.1:{tb_port}/"
    viewers = _viewers(exp.folder)
    for viewer in viewers:
        if not port or viewer.get("port") == port:
            return f"http://127.0.0.1:{viewer['port']}/"
    with root_lock(exp.folder.path.parent):
        chosen = (
            port
            or allocate_ports(["tensorboard"], ports_in_use_by_experiments(exp.folder.path.parent))[
                "tensorboard"
            ]
        )
        if not port_is_free(chosen):
            raise LaunchError(
                f"port {chosen} on 127.0.0.1 is already in use; pick another with --port"
            )
        with private_files():
            out = open(exp.folder.logs / "tensorboard-viewer.out", "ab")  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tensorboard.main",
                    "--logdir",
                    str(exp.folder.tensorboard),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(chosen),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            out.close()
        # an earlier viewer on another port keeps running: someone may be looking at it
        write_json_atomic(
            exp.folder.path / "tensorboard.json",
            {"viewers": [*viewers, {"pid": proc.pid, "port": chosen}]},
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not port_is_free(chosen):
            return f"http://127.0.0.1:{chosen}/"
        if proc.poll() is not None:
            raise LaunchError(f"tensorboard exited (code {proc.returncode}); see {exp.folder.logs}")
        time.sleep(0.2)
    raise LaunchError("tensorboard did not start listening within 60 s")


def _viewers(folder: ExperimentFolder) -> list[dict[str, Any]]:
    """The TensorBoard viewers `tb` started on this folder that still run."""
    record = read_json(folder.path / "tensorboard.json") or {}
    viewers = record.get("viewers", [record] if record.get("pid") else [])
    return [v for v in viewers if v.get("pid") and pid_alive(v["pid"])]


def _stop_tensorboard(folder: ExperimentFolder) -> None:
    for viewer in _viewers(folder):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(viewer["pid"], signal.SIGTERM)
    (folder.path / "tensorboard.json").unlink(missing_ok=True)
