"""A minimal metric writer for single-process runs: TensorBoard event files when given a folder.

Distributed roles report to tensorplex instead; this writer is for the single-process trainer and
for tests, and keeps the last value of every metric so callers can read them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


class MetricWriter:
    """Writes namespaced scalars (`losses/approx_kl`) to TensorBoard, or only remembers them."""

    def __init__(self, log_dir: str | Path | None = None) -> None:
        self.last: dict[str, float] = {}
        self._writer: Any = None
        if log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(log_dir))

    def add_scalars(self, values: Mapping[str, float], step: int) -> None:
        """Record each value at `step`."""
        for name, value in values.items():
            self.last[name] = float(value)
            if self._writer is not None:
                self._writer.add_scalar(name, float(value), step)

    def close(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
