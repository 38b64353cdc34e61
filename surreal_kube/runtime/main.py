"""`surreal-kube-role <role> [--id N]`: the one entry point of every process of an experiment.

Everything else comes from the environment (see `runtime.context`). Exit codes: 0 after a clean
stop (SIGTERM/SIGINT once the role runs), 143 (130) for a SIGTERM (SIGINT) during start-up, 1
when the role failed, 2 for a bad command line or environment.

Signals. A role has two phases. During start-up (the imports: seconds for pydantic, numpy and
torch on a busy node; the role's construction: environment, model, checkpoint restore) it holds
nothing worth flushing, so a SIGTERM ends it at once with 143, as the default action would.
Once the role is constructed, SIGTERM asks for its clean stop (`runtime.lifecycle`: finish the
step, checkpoint, flush). The start-up handler is installed by the first line of `main`, before
any import that takes time: this module imports only what the interpreter has already loaded.

PID 1. In a pod, `surreal-kube-role` is the container's PID 1, and the kernel drops every signal
whose disposition is the default for a PID namespace's init: without a handler, the kubelet's
SIGTERM is lost and the pod waits out its whole grace period before SIGKILL. An init must also
reap the orphans reparented to it (an exec probe's leftovers, TensorBoard's children), or they
stay zombies. So when it finds itself PID 1, the entry point becomes a tiny init (`_init`): it
forwards the signals a container receives to one forked child that runs the role as an ordinary
process, reaps every child, and exits with the role's code (128 + N when a signal N killed it).
We chose a Python init over adding tini to the image: it needs no image change, costs one fork
of an interpreter that has imported nothing yet (a few MB, shared copy-on-write) and its handlers
are installed a few milliseconds after the interpreter starts. A signal in those first
milliseconds, before any Python code runs, is still lost; nothing inside the container can catch
it. With `shareProcessNamespace` the pause container is PID 1 and `_init` is not used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

ROLES: dict[str, str] = {
    "learner": "surreal_kube.runtime.learner:LearnerRole",
    "replay": "surreal_kube.runtime.replay:ReplayBalancer",
    "replay-shard": "surreal_kube.runtime.replay:ReplayShard",
    "ps": "surreal_kube.runtime.ps:ParameterProxy",
    "ps-shard": "surreal_kube.runtime.ps:ParameterShardRole",
    "tensorplex": "surreal_kube.runtime.tensorplex:TensorplexRole",
    "loggerplex": "surreal_kube.runtime.loggerplex:LoggerplexRole",
    "tensorboard": "surreal_kube.runtime.tensorboard:TensorboardRole",
    "agents": "surreal_kube.runtime.agent:AgentsRole",
    "eval": "surreal_kube.runtime.eval:EvalRole",
}
"""Role name -> class, imported lazily so that a replay shard never imports torch."""

NICENESS: dict[str, int] = {"agents": 10, "eval": 5, "tensorboard": 10}
"""Roles that yield the CPU to the others, which the experiment waits on (the learner first).

On one machine (the local backend, or pods without CPU limits sharing a node) the kernel's fair
scheduler gives every runnable process an equal share: with 8 agent processes on 2 cores the
learner got a tenth of the CPU, half its iterations with 2 agents, while the agents made
experience that aged past the policy-lag bound waiting for it. Agents are throttled by replay's
rate limiter anyway, so giving them what the learner leaves costs them nothing the learner could
have used. Evals rank between: their loop takes the snapshots on time while agents run flat
out (the episodes are played by a thread under SCHED_IDLE, runtime/eval.py). TensorBoard's
start (a second of CPU, at the moment every role starts) waits behind the roles. In a pod with a
CPU limit of its own, niceness only orders the processes of that container: harmless.

Niceness orders processes of one session only where the kernel groups each session for the
scheduler (autogroup, on by default in most distributions' kernels): a role in a session of its own
competes as a group of its own, whatever its nice value (two busy processes on one core, nice 0 and
nice 10, each in its own session, split it half and half, not about 9 to 1). So the local backend
starts every role in its own process group, for signals, but in the supervisor's session
(`runtime.forkserver`, `launch.local`).
"""

FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
"""What the init passes on to the role (SIGKILL and SIGSTOP cannot be caught, by design)."""
STARTUP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals that end a role still starting up (exit 128 + N)."""


def role_class(role: str) -> type:
    """The class implementing `role`."""
    import importlib

    module, _, name = ROLES[role].partition(":")
    return getattr(importlib.import_module(module), name)


def _exit_during_startup(signum: int, frame: FrameType | None) -> None:
    """Start-up has nothing to flush: end now, with the code the default action would give."""
    name = signal.Signals(signum).name
    os.write(2, f"surreal-kube-role: {name} during start-up: exiting\n".encode())
    os._exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run one role until it is stopped; returns the exit code (see the module docstring)."""
    for sig in STARTUP_SIGNALS:  # first: every import below takes time
        signal.signal(sig, _exit_during_startup)

    import argparse
    import logging

    from surreal_kube.errors import SurrealKubeError

    log = logging.getLogger("surreal_kube.runtime")
    parser = argparse.ArgumentParser(
        prog="surreal-kube-role",
        description="Run one process of a surreal-kube experiment (environment from the topology).",
    )
    parser.add_argument("role", choices=sorted(ROLES), help="the role to run")
    parser.add_argument("--id", type=int, default=None, help="replica or shard index")
    args = parser.parse_args(argv)

    from surreal_kube.runtime.context import RoleContext
    from surreal_kube.runtime.lifecycle import (
        StopFlag,
        clear_heartbeat,
        install_signal_handlers,
        watch_supervisor,
    )
    from surreal_kube.runtime.logs import setup_logging

    clear_heartbeat()  # a beat left by the previous container must not vouch for this one
    try:
        ctx = RoleContext.from_env(role=args.role, index=args.id)
        ctx.install_curve()  # before the first socket (the log forwarder's, next line)
    except SurrealKubeError as exc:
        print(f"surreal-kube-role: {exc}", file=sys.stderr)
        return 2
    setup_logging(ctx.process, ctx.optional_addr("loggerplex"))
    if NICENESS.get(args.role):
        with contextlib.suppress(OSError):  # a seccomp profile may forbid it: run as we are
            os.nice(NICENESS[args.role])
    stop = StopFlag()
    watch_supervisor(stop)  # a role never outlives the local supervisor that started it
    role = None
    code = 0
    try:
        ctx.spec  # noqa: B018 - load the config now: a bad one is a start-up error
        role = role_class(args.role)(ctx, stop)
        install_signal_handlers(stop)  # running: from now on a SIGTERM is a clean stop
        role.run()
        log.info("stopped (%s)", stop.reason or "done")
    except SurrealKubeError as exc:
        log.error("%s", exc)
        code = exc.exit_code
    except Exception:
        log.exception("%s failed", ctx.process)
        code = 1
    finally:
        if role is not None:
            try:
                role.close()
            except Exception:
                log.exception("error while closing %s", ctx.process)
        logging.shutdown()
    return code


def _init() -> int | None:
    """Be PID 1 for the role (see the module docstring): returns None in the forked child,
    which goes on to run the role, and the role's exit code in the init once it has ended.

    The forwarded signals are blocked before the fork: a blocked signal is queued even for a
    namespace's init, so one that arrives in between waits and reaches the child once the init
    knows its pid.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
    role_pid = 0

    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):  # just ended: the wait below sees it
            os.kill(role_pid, signum)

    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, forward)
    role_pid = os.fork()
    if role_pid == 0:
        for sig in FORWARDED_SIGNALS:
            signal.signal(
                sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            )
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
        return None
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
    while True:
        try:
            pid, status = os.wait()  # every child: orphans reparented to us are reaped too
        except ChildProcessError:  # cannot happen while the role runs; never loop on it
            return 1
        if pid == role_pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def _exit_now(code: int) -> None:
    """End the process once the role has stopped, without the interpreter's finalization.

    The role has closed what it holds (`main`'s finally: sockets, checkpoint, progress, logs).
    What finalization would add is one garbage collection over every object torch's compiler
    stack and sympy created: seconds of a learner's stop "Garbage-collecting" (faulthandler during
    the exit), more with several learners stopping at once, time taken out of the pod's grace
    period. Forked roles (runtime.forkserver) end the same way.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run() -> None:
    """Console-script entry point: the role itself, behind a tiny init when it is PID 1."""
    if os.getpid() == 1:
        code = _init()
        if code is not None:
            sys.exit(code)
    _exit_now(main())
