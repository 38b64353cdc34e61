"""Schedules: a value as a function of time (learner iterations or env steps).

Learning rates and exploration noise decay over a run; a schedule is a pure function of `t` so that
a restored learner picks the same value it would have had, with no hidden state to checkpoint.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

from surreal_kube.experiment.algorithms import ScheduleConfig


class Schedule(Protocol):
    """Anything with `value(t)`."""

    def value(self, t: float) -> float:
        """Value of the schedule at time t."""


class ConstantSchedule:
    """Value remains constant over time."""

    def __init__(self, value: float) -> None:
        self._v = float(value)

    def value(self, t: float) -> float:
        """Value of the schedule at time t (always the same)."""
        return self._v


def linear_interpolation(left: float, right: float, alpha: float) -> float:
    """`left` at alpha=0, `right` at alpha=1, straight line in between."""
    return left + alpha * (right - left)


class PiecewiseSchedule:
    """Piecewise-linear schedule through `(time, value)` endpoints.

    Between two endpoints the value is interpolated; before the first or after the last endpoint
    `outside_value` is returned, and if that is None asking for such a time is an error, because a
    silent extrapolation would hide a schedule that is too short for the run.
    """

    def __init__(
        self,
        endpoints: Sequence[tuple[float, float]],
        outside_value: float | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("a piecewise schedule needs at least one endpoint")
        times = [t for t, _ in endpoints]
        if times != sorted(times):
            raise ValueError(f"endpoint times must be increasing, got {times}")
        self._endpoints = [(float(t), float(v)) for t, v in endpoints]
        self._outside = outside_value

    def value(self, t: float) -> float:
        """Value at time t (see class docstring for times outside the endpoints)."""
        points = self._endpoints
        if len(points) == 1 and t == points[0][0]:
            return points[0][1]
        for (lt, lv), (rt, rv) in itertools.pairwise(points):
            if lt <= t < rt:
                return linear_interpolation(lv, rv, (t - lt) / (rt - lt))
        if t == points[-1][0]:
            return points[-1][1]
        if self._outside is None:
            raise ValueError(f"t={t} is outside the schedule [{points[0][0]}, {points[-1][0]}]")
        return float(self._outside)


class LinearSchedule:
    """Linear interpolation from `initial` to `final` over `timesteps`; `final` afterwards."""

    def __init__(self, timesteps: float, final: float, initial: float = 1.0) -> None:
        if timesteps <= 0:
            raise ValueError(f"timesteps must be positive, got {timesteps}")
        self.timesteps = float(timesteps)
        self.initial = float(initial)
        self.final = float(final)

    def value(self, t: float) -> float:
        """Value at time t, clamped to `final` once t >= timesteps (and `initial` for t <= 0)."""
        fraction = min(max(float(t) / self.timesteps, 0.0), 1.0)
        return linear_interpolation(self.initial, self.final, fraction)


def schedule_from_config(config: ScheduleConfig, initial: float) -> Schedule:
    """The schedule a `ScheduleConfig` describes, scaled so that it starts at `initial`."""
    if config.kind == "constant":
        return ConstantSchedule(initial)
    return LinearSchedule(config.horizon, initial * config.final_fraction, initial)
