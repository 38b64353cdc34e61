"""Schedules: a value as a function of time (learner iterations, or the run's budget spent).

Learning rates and exploration noise decay over a run; a schedule is a pure function of `t` so that
a restored learner picks the same value it would have had, with no hidden state to checkpoint.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

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
    """The schedule a `ScheduleConfig` describes, scaled so that it starts at `initial`.

    `linear` runs over learner iterations; `budget` over the fraction of the run's budget spent
    (0 to 1, see `RunBudget`), so its floor is reached at the budget whatever the iteration rate.
    """
    if config.kind == "constant":
        return ConstantSchedule(initial)
    horizon = 1.0 if config.kind == "budget" else config.horizon
    return LinearSchedule(horizon, initial * config.final_fraction, initial)


def scheduled_value(
    config: ScheduleConfig, schedule: Schedule, iteration: int, budget_fraction: float | None
) -> float:
    """A schedule's value now: at the learner's iteration, or at the budget's fraction spent.

    A `budget` schedule without a budget (no maxEnvSteps, no maxTimeSeconds) holds its initial
    value; the spec refuses that combination, so this only happens to a learner driven by hand.
    """
    if config.kind == "budget":
        return schedule.value(0.0 if budget_fraction is None else budget_fraction)
    return schedule.value(iteration)


class RunBudget:
    """How much of a run's budget is spent: global env steps or wall time, whichever leads.

    Learning rates annealed to a budget must reach their floor when the run ends, so they are
    keyed to what ends the run (session.maxEnvSteps, session.maxTimeSeconds), not to learner
    iterations, whose rate varies with the machine. Wall time counts from this object's creation
    plus `spent_seconds` (what earlier runs of a restarted learner spent).
    """

    def __init__(
        self,
        max_env_steps: int | None,
        max_seconds: float | None,
        spent_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_env_steps is not None and max_env_steps <= 0:
            raise ValueError(f"max_env_steps must be positive, got {max_env_steps}")
        if max_seconds is not None and max_seconds <= 0:
            raise ValueError(f"max_seconds must be positive, got {max_seconds}")
        self.max_env_steps = max_env_steps
        self.max_seconds = max_seconds
        self._clock = clock
        self._origin = clock() - float(spent_seconds)

    @property
    def seconds(self) -> float:
        """Wall time spent, earlier runs included."""
        return self._clock() - self._origin

    def fraction(self, env_steps: int) -> float | None:
        """Fraction spent in [0, 1] (the larger of steps and time); None without a budget."""
        parts = []
        if self.max_env_steps is not None:
            parts.append(env_steps / self.max_env_steps)
        if self.max_seconds is not None:
            parts.append(self.seconds / self.max_seconds)
        if not parts:
            return None
        return min(max(max(parts), 0.0), 1.0)


@runtime_checkable
class FollowsBudget(Protocol):
    """A learner with schedules that can follow the run's budget (PPO)."""

    budget_fraction: float | None
    budget_seconds: float


def spend_budget(learner: object, budget: RunBudget, env_steps: int) -> None:
    """Tell a learner whose schedules can follow the run's budget (PPO's `budget_fraction`) how
    much of it is spent, before its next update; other learners have no such schedule.

    Both drivers (the learner role, the one-process trainer) call it: without it a `budget`
    schedule held its initial value for the whole run, and said so only as
    `ppo/budget_fraction` -1 in TensorBoard."""
    if isinstance(learner, FollowsBudget):
        learner.budget_fraction = budget.fraction(env_steps)
        learner.budget_seconds = budget.seconds
