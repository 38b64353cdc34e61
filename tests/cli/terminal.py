"""A real terminal for the CLI: tmux at a fixed size, its screen captured as text.

`run_in_tmux` starts `surreal-kube create --local` in a detached tmux session of the given width
(a private server on its own socket, so nothing of the user's tmux is touched), captures the
screen once the live view is drawn, presses Ctrl-C (tmux sends it through the terminal, as a
person does) and captures the screen again after the command has exited.

Run as a script it refreshes the fixtures the tests compare against:

    .venv/bin/python -m tests.cli.terminal   # writes tests/cli/fixtures/live-{80,200}.txt ...
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WIDTHS = (80, 200)
HEIGHT = 40
EXPERIMENT = "exp-tty"
RUN_ARGS = [
    "--algorithm", "ppo", "--env", "gym:CartPole-v1", "--num-agents", "1", "--num-evals", "1",
    "--max-env-steps", "50000000", "--set", "evals.intervalSeconds=3",
    "--set", "session.metrics.agentIntervalSeconds=1",
    "--set", "session.metrics.learnerIntervalSeconds=1",
]  # fmt: skip


@dataclass
class Captures:
    """The screen while the live view runs, and after Ctrl-C once the command has exited."""

    width: int
    live: str
    stopped: str
    exit_code: int | None


def _tmux(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["tmux", "-S", str(sock), *args], capture_output=True, text=True, timeout=30
    )


def _screen(sock: Path) -> str:
    """The visible screen, trailing blanks removed (tmux pads every row to the width)."""
    text = _tmux(sock, "capture-pane", "-p", "-t", "cli").stdout
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines()) + "\n"


def _wait(what: str, predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def run_in_tmux(width: int, timeout: float = 300.0) -> Captures:
    """Run a local experiment in a `width`-column tmux pane; capture it live and after Ctrl-C.

    The experiment lives under a short temporary folder (`/tmp/sk-XXXXXXXX`), the same length
    in every run, so the paths printed at the end wrap the same way as in the fixtures.
    """
    if shutil.which("tmux") is None:
        raise RuntimeError("tmux is not installed (make deb installs it)")
    with tempfile.TemporaryDirectory(prefix="sk-", dir="/tmp") as tmp:
        return _run(width, Path(tmp), timeout)


def _run(width: int, root: Path, timeout: float) -> Captures:
    sock = root / "tmux.sock"
    done = root / "exit-code"
    sk = f"{sys.executable} -m surreal_kube.cli.main"
    args = " ".join(RUN_ARGS)
    command = (
        f"{sk} create {EXPERIMENT} --local --root {root / 'exps'} {args}; echo $? > {done}; "
        "sleep 600"  # keep the pane (and its last screen) until it is captured
    )
    started = _tmux(
        sock, "new-session", "-d", "-s", "cli", "-x", str(width), "-y", str(HEIGHT),
        "env", "TERM=xterm-256color", "COLUMNS=", "LINES=", "bash", "-c", command,
    )  # fmt: skip
    if started.returncode != 0:
        raise RuntimeError(f"tmux did not start: {started.stderr.strip()}")
    folder = root / "exps" / EXPERIMENT
    try:
        _wait(
            "the live view with a running learner and a first evaluation",
            lambda: re.search(r"learner iter [1-9].*eval return -?\d", _screen(sock)),
            timeout,
        )
        time.sleep(2)  # one more refresh: rates and the bar have values
        live = _screen(sock)
        _tmux(sock, "send-keys", "-t", "cli", "C-c")
        _wait("the command to exit after Ctrl-C", done.exists, 120)
        time.sleep(0.5)
        stopped = _screen(sock)
        code = int(done.read_text().strip() or -1)
        return Captures(width, live, stopped, code)
    finally:
        _tmux(sock, "kill-server")
        _stop_leftovers(folder)


def _stop_leftovers(folder: Path) -> None:
    """Whatever a failed run left (the supervisor and its role groups) is killed."""
    if not folder.exists():
        return
    from surreal_kube.launch.local import backend

    with contextlib.suppress(Exception):
        backend.stop(backend.find(folder.name, folder.parent), timeout=20)


def refresh() -> None:
    """Capture every width and write the fixtures."""
    FIXTURES.mkdir(exist_ok=True)
    for width in WIDTHS:
        cap = run_in_tmux(width)
        (FIXTURES / f"live-{width}.txt").write_text(cap.live)
        (FIXTURES / f"stopped-{width}.txt").write_text(cap.stopped)
        print(f"width {width}: exit {cap.exit_code}")


if __name__ == "__main__":
    refresh()


def shape(screen: str) -> list[str]:
    """What a screen looks like with the figures that change from run to run taken out.

    Numbers become `9`, runs of spaces one space, the progress bar `BAR`, temporary paths
    `PATH`, the supervisor's budget line its first word; what stays is the layout: which lines there are, in which order, which words stand
    together on a line. Two captures of the same view have the same shape.
    """
    lines = []
    for line in screen.splitlines():
        line = re.sub(r"/tmp/\S+", "PATH", line)
        line = re.sub(r"[━╸╺╾╼─]+", "BAR", line)
        line = re.sub(r"\d[\d,.:]*", "9", line)
        line = re.sub(r" +", " ", line).strip()
        if line.startswith("budget:"):  # the supervisor's words, not the view's layout
            line = "budget: ..."
        if line:
            lines.append(line)
    return lines
