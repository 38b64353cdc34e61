"""The live status view of a local experiment, drawn from its state dict.

The same drawing serves the foreground `create` (refreshed every second) and `status NAME`
(once, from the state file), so both show the same thing.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

_STATE_STYLE = {"running": "green", "backoff": "yellow", "failed": "bold red", "stopped": "dim"}


def _fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class RateMeter:
    """Rates (per second) of counters between successive snapshots."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, float]] = {}
        self.rates: dict[str, float] = {}

    def update(self, key: str, value: float, now: float | None = None) -> float:
        now = time.time() if now is None else now
        if key in self.last:
            t0, v0 = self.last[key]
            if now - t0 >= 2.0:
                self.rates[key] = (value - v0) / (now - t0)
                self.last[key] = (now, value)
        else:
            self.last[key] = (now, value)
        return self.rates.get(key, 0.0)


def render_state(
    state: dict[str, Any],
    *,
    max_env_steps: int | None,
    max_time: float | None,
    rates: RateMeter | None = None,
) -> Group:
    """Per-process table, throughput, latest eval return and a progress bar against the budget."""
    steps = int(state.get("env_steps") or 0)
    iteration = int(state.get("learner_iteration") or 0)
    elapsed = float(state.get("elapsed") or 0.0)
    eval_return = state.get("eval_return")
    # Two short lines, not one long one: at 80 columns a label never parts from its value.
    header = Text.assemble(
        (f"{state.get('name', '?')}", "bold"),
        f"  {state.get('phase', '?')}",
        f"  elapsed {_fmt_duration(elapsed)}",
    )
    figures = Text.assemble(
        f"env steps {steps:,}",
        f"  learner iter {iteration:,}",
        "  eval return " + (f"{eval_return:.1f}" if isinstance(eval_return, int | float) else "-"),
    )
    parts: list[Any] = [header, figures]
    if rates is not None:
        sps = rates.update("steps", steps)
        ips = rates.update("iters", iteration)
        parts.append(Text(f"env steps/s {sps:,.0f}   learner iterations/s {ips:,.2f}"))
    table = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("process", "role", "state", "restarts", "pid", "last exit"):
        table.add_column(col)
    for name, proc in (state.get("processes") or {}).items():
        st = str(proc.get("state", "?"))
        table.add_row(
            name,
            str(proc.get("role", "")),
            Text(st, style=_STATE_STYLE.get(st, "")),
            str(proc.get("restarts", 0)),
            str(proc.get("pid") or "-"),
            "" if proc.get("last_exit") is None else str(proc.get("last_exit")),
        )
    parts.append(table)
    fraction = None
    if max_env_steps:
        fraction = steps / max_env_steps
        label = f"{steps:,} / {max_env_steps:,} env steps"
    elif max_time:
        fraction = elapsed / max_time
        label = f"{_fmt_duration(elapsed)} / {_fmt_duration(max_time)}"
    if fraction is not None:
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=1.0, completed=min(1.0, fraction), width=40), Text(label))
        parts.append(bar)
    if state.get("reason"):
        parts.append(Text(f"reason: {state['reason']}", style="dim"))
    return Group(*parts)
