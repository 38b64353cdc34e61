"""`python -m surreal_kube.runtime.forkserver`: imports the roles' libraries once, forks the roles.

Eleven role processes each importing torch, gymnasium, MuJoCo, ZeroMQ and the spec at the same
moment kept a small machine busy for a long time before the learner's first update (`bench/local.py`
times it); most of it was the same imports done eleven times. The local backend starts this server
first; it imports what roles need, in two stages (light: numpy, ZeroMQ, the spec, the runtime;
heavy: torch, gymnasium, MuJoCo, only when a role that needs them is asked for), and forks each role
from there: a role starts in milliseconds, sharing the imported pages copy-on-write.

Forking is safe here because the server never runs anything but imports: no ZeroMQ context, no
torch operation (so no OpenMP pool, no CUDA), no thread of its own. The child leads its own
process group (signalled as a unit, as a pod would be) in the experiment's one session (see
`runtime.main.NICENESS`), points stdout/stderr at its log file, takes the environment it was sent
and runs the same `runtime.main.main` as `surreal-kube-role`.

Protocol: JSON lines (never pickle). On stdin, requests
`{"id": n, "argv": [...], "env": {...}, "cwd": "...", "out": "<log file>", "heavy": bool}`;
on stdout, `{"id": n, "pid": p}` (or `{"id": n, "error": "..."}`) once forked, and
`{"exit": p, "code": c}` when a child ends (c as subprocess reports it: -N for signal N). The
server exits when its stdin closes, that is when the supervisor is gone; its children then see
their parent die and stop by themselves (runtime.lifecycle.watch_supervisor).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import sys
import time
from typing import Any

LIGHT = (
    "numpy",
    "zmq",
    "msgpack",
    "yaml",
    "surreal_kube.experiment.resolve",
    "surreal_kube.runtime.main",
    "surreal_kube.runtime.context",
    "surreal_kube.runtime.lifecycle",
    "surreal_kube.runtime.logs",
    "surreal_kube.runtime.replay",
    "surreal_kube.runtime.ps",
    "surreal_kube.runtime.loggerplex",
    "surreal_kube.runtime.tensorplex",
    "surreal_kube.runtime.tensorboard",
)
HEAVY = (
    "torch",  # not torch._dynamo, 1.5 s more: no role uses it (see rl/optim.py)
    "gymnasium",
    "mujoco",
    "surreal_kube.envs",
    "surreal_kube.rl.factory",
    "surreal_kube.session.checkpoint",
    "surreal_kube.runtime.learner",
    "surreal_kube.runtime.agent",
    "surreal_kube.runtime.eval",
)
_loaded: set[str] = set()


def preload(stage: str) -> None:
    """Import the modules of stage "light" or "heavy" (a missing one is left to the role)."""
    if stage in _loaded:
        return
    if stage == "heavy" and not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")  # as envs.make does before rendering
    started = time.monotonic()
    for name in LIGHT if stage == "light" else HEAVY:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the role imports it again and reports the error in its log
            print(f"forkserver: cannot preload {name}: {exc}", file=sys.stderr, flush=True)
    _loaded.add(stage)
    took = time.monotonic() - started
    print(f"forkserver: {stage} modules loaded in {took:.2f} s", file=sys.stderr, flush=True)


def _name_process(name: str) -> None:
    """What `ps -o comm` and top show for the role (Linux keeps 15 bytes)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _child(request: dict[str, Any], channels: tuple[int, int], started: int) -> None:
    """In the forked child: become the role process and run it; never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # not setsid: a session of its own would void its niceness
        os.close(started)  # the server learns that our process group exists
        for fd in channels:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(null)
        os.close(out)
        os.chdir(request["cwd"])
        _name_process(str(request.get("name") or request["argv"][0]))
        env = dict(request["env"])
        env["SURREAL_SUPERVISOR_PID"] = str(os.getppid())  # we watch the server, our parent
        os.environ.clear()
        os.environ.update(env)
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        if "numpy" in sys.modules:  # the server's global RNG state is shared by every fork
            sys.modules["numpy"].random.seed(int.from_bytes(os.urandom(4), "little"))
        from surreal_kube.runtime.main import main

        sys.argv = ["surreal-kube-role", *request["argv"]]
        code = main(list(request["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(requests_fd: int, replies_fd: int) -> int:
    """Fork a role per request until the request channel closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    buffer = b""
    children: set[int] = set()

    def reply(message: dict[str, Any]) -> None:
        os.write(replies_fd, (json.dumps(message) + "\n").encode())

    preload("light")
    reply({"ready": "light"})
    while True:
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        readable, _, _ = select.select([requests_fd], [], [], 0.05)
        if not readable:
            continue
        chunk = os.read(requests_fd, 65536)
        if not chunk:  # the supervisor is gone, or done with us
            return 0
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request: Any = None
            try:
                request = json.loads(line)
                if request.get("heavy"):
                    preload("heavy")
                sys.stdout.flush()
                sys.stderr.flush()
                started_r, started_w = os.pipe()
                pid = os.fork()
            except Exception as exc:
                ident = request.get("id") if isinstance(request, dict) else None
                reply({"id": ident, "error": f"{type(exc).__name__}: {exc}"})
                continue
            if pid == 0:
                os.close(started_r)
                _child(request, (requests_fd, replies_fd), started_w)
            os.close(started_w)
            os.read(started_r, 1)  # EOF once the child has its own group: killpg(pid) works
            os.close(started_r)
            children.add(pid)
            reply({"id": request["id"], "pid": pid})


def _exit_with_supervisor() -> None:
    """Exit when the supervisor dies, even in the middle of a preload (its stdin closing is
    only read between requests): the parent-death signal, checked against the parent pid."""
    import signal

    from surreal_kube.runtime.lifecycle import PARENT_DEATH_SIGNAL, _set_parent_death_signal

    parent = int(os.environ.get("SURREAL_SUPERVISOR_PID") or os.getppid())

    def on_parent_death(signum: int, frame: object) -> None:
        if os.getppid() != parent:  # not just the supervisor thread that started us
            os._exit(0)

    signal.signal(PARENT_DEATH_SIGNAL, on_parent_death)
    _set_parent_death_signal(PARENT_DEATH_SIGNAL)
    if os.getppid() != parent:
        os._exit(0)


def main() -> int:
    """Serve on private copies of stdin/stdout; the standard streams go to stderr's log."""
    _exit_with_supervisor()
    requests_fd, replies_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # stray prints of imported modules go to the server's log
    os.close(null)
    return serve(requests_fd, replies_fd)


if __name__ == "__main__":
    sys.exit(main())
