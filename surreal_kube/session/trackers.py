"""Small bookkeeping helpers: periodic triggers, smoothed averages, timers.

Roles use these to decide when to publish, log, fetch or checkpoint without keeping ad-hoc
counters, and to report smoothed rates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class PeriodicTracker:
    """Counts a value (steps, iterations) and says when it crosses into a new period.

    Periods are measured from `init_endpoint`: with period 100, the tracker triggers once when the
    value reaches 100, 200, ... even if increments jump over several boundaries at once (it then
    triggers once, and the next trigger is at the next boundary after the value). With `first`, the
    very first call also triggers, so that e.g. an agent fetches parameters before its first step.
    """

    def __init__(
        self, period: int, init_value: int = 0, init_endpoint: int = 0, first: bool = False
    ) -> None:
        if period < 1:
            raise ValueError(f"period must be >= 1, got {period}")
        self.period = period
        self.value = init_value
        self._endpoint = init_endpoint
        self._first = first

    def _update_endpoint(self) -> bool:
        if self._first:
            self._first = False
            self._advance()
            return True
        return self._advance()

    def _advance(self) -> bool:
        if self.value >= self._endpoint + self.period:
            offset = self.value - self._endpoint
            self._endpoint += offset - offset % self.period
            return True
        return False

    def track_increment(self, increment: int = 1) -> bool:
        """Add to the value; True if we enter the next period."""
        self.value += increment
        return self._update_endpoint()

    def track_absolute(self, value: int) -> bool:
        """Set the value; True if we enter the next period."""
        self.value = value
        return self._update_endpoint()


class RunningAverage:
    """Exponential moving average: avg <- decay * avg + (1 - decay) * x.

    The default decay 0.9995 averages over roughly the last 2000 values. The first value seeds the
    average instead of being shrunk towards zero, so early reports are not biased low.
    """

    def __init__(self, decay: float = 0.9995, init_value: float | None = None) -> None:
        if not 0 <= decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = decay
        self._value = init_value

    def add(self, value: float) -> None:
        """Fold in one value."""
        if self._value is None:
            self._value = float(value)
        else:
            self._value = self.decay * self._value + (1.0 - self.decay) * float(value)

    @property
    def value(self) -> float | None:
        """Current estimate (None before any value)."""
        return self._value


class TimeRecorder:
    """Smoothed duration of a repeated block: `with recorder.time(): ...`."""

    def __init__(
        self, decay: float = 0.9995, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.average = RunningAverage(decay)
        self.clock = clock
        self.total = 0.0
        self.count = 0

    @contextmanager
    def time(self) -> Iterator[None]:
        """Time the enclosed block."""
        start = self.clock()
        try:
            yield
        finally:
            elapsed = self.clock() - start
            self.average.add(elapsed)
            self.total += elapsed
            self.count += 1

    @property
    def avg(self) -> float | None:
        """Smoothed seconds per block (None before the first)."""
        return self.average.value
