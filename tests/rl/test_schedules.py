"""Schedules at their edges."""

import pytest

from surreal_kube.experiment.algorithms import ScheduleConfig
from surreal_kube.rl.schedules import (
    ConstantSchedule,
    LinearSchedule,
    PiecewiseSchedule,
    schedule_from_config,
)


def test_constant():
    s = ConstantSchedule(0.3)
    assert s.value(0) == s.value(10**9) == 0.3


def test_linear_edges():
    s = LinearSchedule(100, final=0.1, initial=1.0)
    assert s.value(0) == 1.0
    assert s.value(50) == pytest.approx(0.55)
    assert s.value(100) == pytest.approx(0.1)
    assert s.value(10_000) == pytest.approx(0.1)
    assert s.value(-5) == 1.0


def test_piecewise_interpolates_and_uses_outside_value():
    s = PiecewiseSchedule([(0, 1.0), (10, 0.5), (20, 0.0)], outside_value=-1.0)
    assert s.value(0) == 1.0
    assert s.value(5) == pytest.approx(0.75)
    assert s.value(10) == pytest.approx(0.5)
    assert s.value(15) == pytest.approx(0.25)
    assert s.value(20) == 0.0
    assert s.value(20.5) == -1.0
    assert s.value(-1) == -1.0


def test_piecewise_without_outside_value_refuses_to_extrapolate():
    s = PiecewiseSchedule([(0, 1.0), (10, 0.0)])
    with pytest.raises(ValueError, match="outside"):
        s.value(11)


def test_piecewise_needs_increasing_times():
    with pytest.raises(ValueError):
        PiecewiseSchedule([(10, 1.0), (0, 0.0)])


def test_from_config():
    assert schedule_from_config(ScheduleConfig(), 3e-4).value(10**6) == 3e-4
    lin = schedule_from_config(ScheduleConfig(kind="linear", final_fraction=0.1, horizon=10), 2.0)
    assert lin.value(0) == 2.0
    assert lin.value(10) == pytest.approx(0.2)


def test_budget_schedule_reaches_its_floor_at_the_budget():
    from surreal_kube.rl.schedules import RunBudget, scheduled_value

    cfg = ScheduleConfig(kind="budget", final_fraction=0.1)
    s = schedule_from_config(cfg, 3e-4)
    now = [0.0]
    budget = RunBudget(1000, 60.0, clock=lambda: now[0])
    assert scheduled_value(cfg, s, 7, budget.fraction(0)) == pytest.approx(3e-4)
    assert scheduled_value(cfg, s, 7, budget.fraction(500)) == pytest.approx(1.65e-4)
    assert scheduled_value(cfg, s, 7, budget.fraction(1000)) == pytest.approx(3e-5)
    now[0] = 60.0  # wall time spent first
    assert scheduled_value(cfg, s, 7, budget.fraction(10)) == pytest.approx(3e-5)
    assert RunBudget(None, None).fraction(10**9) is None
