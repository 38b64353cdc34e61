"""The live view, its progress bar and Ctrl-C in a real terminal (tmux) at 80 and 200 columns.

The captures in tests/cli/fixtures/ were taken the same way (`python -m tests.cli.terminal`) and
looked at by a person. A fresh capture must have the same shape (tests/cli/terminal.py: numbers,
paths and the bar's length taken out), no line wider than the terminal, every label on the line
of its value, and Ctrl-C must end the command with exit 0 and the closing lines.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.cli.terminal import FIXTURES, WIDTHS, run_in_tmux, shape

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make deb)"),
]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_fixtures_look_right(width: int) -> None:
    """What a person checked, kept checkable: the layout rules hold in the stored captures."""
    for name in ("live", "stopped"):
        check_layout((FIXTURES / f"{name}-{width}.txt").read_text(), width)


@pytest.mark.parametrize("width", WIDTHS)
def test_live_view_and_ctrl_c_in_a_real_terminal(width: int) -> None:
    cap = run_in_tmux(width)
    assert cap.exit_code == 0, cap.stopped
    for name, screen in (("live", cap.live), ("stopped", cap.stopped)):
        check_layout(screen, width)
        expected = shape((FIXTURES / f"{name}-{width}.txt").read_text())
        assert shape(screen) == expected, f"{name} at {width} columns:\n{screen}"


def check_layout(screen: str, width: int) -> None:
    lines = screen.splitlines()
    assert all(len(line) <= width for line in lines)
    header = next(line for line in lines if "learner iter" in line)
    assert re.search(r"env steps [\d,]+ +learner iter [\d,]+ +eval return -?[\d.]+$", header)
    columns = next(line for line in lines if line.startswith("process"))
    assert columns.split() == ["process", "role", "state", "restarts", "pid", "last", "exit"]
    bar = next(line for line in lines if "env steps" in line and " / " in line)
    assert re.search(r"[━╸╺]+ +[\d,]+ / 50,000,000 env steps$", bar)
    names = [line.split()[0] for line in lines[lines.index(columns) + 1 : lines.index(bar)]]
    assert names[0] == "learner" and names[-2:] == ["agents-0", "evals-0"]


def test_delete_asks_on_a_terminal_and_no_keeps_everything(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    from tests.cli.test_first_day import fake_local_experiment

    root = tmp_path / "exps"
    folder = fake_local_experiment(root, "exp-ask")
    sock = tmp_path / "tmux.sock"

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", str(sock), *args], capture_output=True, text=True, timeout=30
        ).stdout

    def screen_when(text: str) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-J", "-t", "ask")
            if text in screen:
                return screen
            time.sleep(0.3)
        raise AssertionError(f"no {text!r} on the screen:\n{screen}")

    command = f"{sys.executable} -m surreal_kube.cli.main delete exp-ask --root {root}"
    shell = f"{command}; echo exit=$?; {command}; echo exit=$?; sleep 600"
    tmux("new-session", "-d", "-s", "ask", "-x", "80", "-y", "20", "bash", "-c", shell)
    try:
        screen = screen_when("[y/N]")
        assert f"Delete exp-ask and its results and checkpoints (4.0 KiB) in {folder}?" in (
            " ".join(screen.split())
        )
        tmux("send-keys", "-t", "ask", "n", "Enter")
        screen_when("exit=1")
        assert folder.exists()  # no: nothing deleted
        tmux("send-keys", "-t", "ask", "y", "Enter")
        screen = screen_when("exit=0")
        assert "deleted exp-ask" in screen and not folder.exists()
    finally:
        tmux("kill-server")
