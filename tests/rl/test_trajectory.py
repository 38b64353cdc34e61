"""Sub-trajectory windows (ownership, padding, bootstrap) and n-step transitions."""

import numpy as np
import pytest

from surreal_kube.rl.trajectory import NStepWriter, SubTrajectoryWriter


def _run(writer: SubTrajectoryWriter, length: int, terminal: bool = True) -> list[dict]:
    items = []
    for t in range(length):
        step = {"obs/low_dim": np.array([t], np.float32), "rewards": np.array(float(t))}
        end = t == length - 1
        extras = {"start": np.array(t)}
        items += writer.add(step, {"bootstrap/low_dim": np.array([t + 1], np.float32)}, end, extras)
    return items


def test_windows_start_every_stride_and_own_each_step_once():
    items = _run(SubTrajectoryWriter(horizon=5, stride=3), length=11)
    starts = [int(i["obs/low_dim"][0, 0]) for i in items]
    assert starts == [0, 3, 6, 9]
    owned = []
    for item in items:
        valid = item["train_mask"] > 0
        owned += item["obs/low_dim"][valid, 0].astype(int).tolist()
    assert sorted(owned) == list(range(11))  # every step trained on exactly once
    # A full window: 5 valid steps, 3 owned, bootstrap = the obs after its last step.
    full = items[0]
    np.testing.assert_array_equal(full["mask"], [1, 1, 1, 1, 1])
    np.testing.assert_array_equal(full["train_mask"], [1, 1, 1, 0, 0])
    assert full["bootstrap/low_dim"][0] == 5
    assert int(full["start"]) == 0


def test_windows_open_at_episode_end_are_padded():
    items = _run(SubTrajectoryWriter(horizon=5, stride=3), length=11)
    last = items[-1]  # starts at 9, only steps 9 and 10 exist
    np.testing.assert_array_equal(last["mask"], [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(last["train_mask"], [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(last["obs/low_dim"][:, 0], [9, 10, 0, 0, 0])
    assert last["bootstrap/low_dim"][0] == 11
    assert int(last["start"]) == 9
    previous = items[-2]  # starts at 6: steps 6..10, all valid, owns 6..8
    np.testing.assert_array_equal(previous["mask"], [1, 1, 1, 1, 1])


def test_default_horizon_and_stride():
    items = _run(SubTrajectoryWriter(horizon=25, stride=20), length=100)
    assert [int(i["start"]) for i in items] == [0, 20, 40, 60, 80]
    assert items[0]["mask"].sum() == 25 and items[0]["train_mask"].sum() == 20
    assert items[-1]["mask"].sum() == 20


def test_writer_keeps_little_memory():
    w = SubTrajectoryWriter(horizon=25, stride=20)
    items = []
    for t in range(1000):
        items += w.add({"x": np.array(t)}, {"bootstrap/x": np.array(t)}, False)
    assert all(rows.shape[0] == 50 for rows in w._rows.values())  # two horizons, preallocated
    # windows that cross a compaction of those rows are whole: every start, 25 steps in order
    assert [int(i["x"][0]) for i in items] == list(range(0, 976, 20))
    for item, start in zip(items, range(0, 976, 20), strict=True):
        np.testing.assert_array_equal(item["x"], np.arange(start, start + 25))
    assert [int(i["bootstrap/x"]) for i in items] == list(range(24, 1000, 20))


def test_items_own_their_arrays_and_steps_keep_their_keys():
    """An item is sent after later steps overwrote the rows it came from, and the actor
    stamps versions into it in place: it must be a copy. A step with other keys is refused."""
    w = SubTrajectoryWriter(horizon=3, stride=1)
    first: list[dict] = []
    for t in range(10):
        got = w.add({"x": np.array(t)}, {"bootstrap/x": np.array(t)}, False)
        if got and not first:
            first = got
    np.testing.assert_array_equal(first[0]["x"], [0, 1, 2])
    first[0]["x"][:] = -1
    items = w.add({"x": np.array(10)}, {"bootstrap/x": np.array(10)}, True)
    assert [int(i["x"][0]) for i in items] == [8, 9, 10]
    with pytest.raises(ValueError, match="this writer's steps have"):
        w.add({"y": np.array(0)}, {"bootstrap/x": np.array(0)}, False)


def test_invalid_stride():
    with pytest.raises(ValueError):
        SubTrajectoryWriter(horizon=5, stride=6)


def _obs(x: float) -> dict:
    return {"obs/low_dim": np.array([x], np.float32)}


def _next(x: float) -> dict:
    return {"next_obs/low_dim": np.array([x], np.float32)}


def test_nstep_transitions():
    w = NStepWriter(n=3, gamma=0.5)
    out = []
    for t in range(4):
        out += w.add(_obs(t), np.array([t]), 1.0, _next(t + 1), False, False)
    assert len(out) == 2
    first = out[0]
    assert first["obs/low_dim"][0] == 0 and first["next_obs/low_dim"][0] == 3
    assert first["rewards"] == pytest.approx(1 + 0.5 + 0.25)
    assert first["discounts"] == pytest.approx(0.125)
    assert first["terminals"] == 0.0


def test_nstep_episode_end_flushes_shorter_transitions():
    w = NStepWriter(n=3, gamma=0.5)
    out = []
    for t in range(4):
        out += w.add(_obs(t), np.array([t]), 1.0, _next(t + 1), t == 3, False)
    # steps 0..3: full transitions from 0 and 1, then 2 (two steps) and 3 (one step) flushed.
    assert [int(i["obs/low_dim"][0]) for i in out] == [0, 1, 2, 3]
    assert [float(i["discounts"]) for i in out] == [0.125, 0.125, 0.25, 0.5]
    assert all(i["next_obs/low_dim"][0] == 4 for i in out[1:])
    assert all(i["terminals"] == 1.0 for i in out[1:])  # terminal reached within their window
    assert out[0]["terminals"] == 0.0


def test_nstep_truncation_still_bootstraps():
    w = NStepWriter(n=2, gamma=0.9)
    out = w.add(_obs(0), np.array([0.0]), 1.0, _next(1), False, True)
    assert out[0]["terminals"] == 0.0 and out[0]["discounts"] == pytest.approx(0.9)
