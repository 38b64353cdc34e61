"""PeriodicTracker, RunningAverage, TimeRecorder."""

import pytest

from surreal_kube.session.trackers import PeriodicTracker, RunningAverage, TimeRecorder


def test_periodic_tracker_triggers_once_per_period():
    t = PeriodicTracker(3)
    assert [t.track_increment() for _ in range(7)] == [
        False,
        False,
        True,
        False,
        False,
        True,
        False,
    ]


def test_periodic_tracker_big_jumps_trigger_once():
    t = PeriodicTracker(10)
    assert t.track_increment(25)
    assert not t.track_increment(4)  # 29: still in the period that started at 20
    assert t.track_increment(1)  # 30


def test_periodic_tracker_first_and_absolute():
    t = PeriodicTracker(5, first=True)
    assert t.track_increment()
    assert not t.track_increment()
    assert t.track_absolute(5)
    assert not t.track_absolute(9)
    assert t.track_absolute(10)


def test_periodic_tracker_init_endpoint():
    t = PeriodicTracker(10, init_value=95, init_endpoint=90)
    assert not t.track_increment(4)
    assert t.track_increment(1)


def test_running_average():
    avg = RunningAverage(decay=0.5)
    assert avg.value is None
    avg.add(4.0)
    assert avg.value == 4.0  # first value seeds the average
    avg.add(0.0)
    assert avg.value == 2.0
    avg.add(2.0)
    assert avg.value == 2.0
    with pytest.raises(ValueError):
        RunningAverage(decay=1.0)


def test_time_recorder_with_fake_clock():
    now = [0.0]
    rec = TimeRecorder(decay=0.5, clock=lambda: now[0])
    with rec.time():
        now[0] += 2.0
    with rec.time():
        now[0] += 4.0
    assert rec.avg == pytest.approx(3.0)
    assert rec.total == pytest.approx(6.0) and rec.count == 2
