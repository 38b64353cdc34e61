"""ZFilter and RewardFilter against numpy over random streams, including merges."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surreal_kube.rl.filters import RewardFilter, RunningMeanStd, ZFilter


def _chunks(rng: np.random.Generator, total: int, shape: tuple[int, ...]) -> list[np.ndarray]:
    data = rng.normal(3.0, 2.0, size=(total, *shape)) * rng.random(shape) * 5
    cuts = np.sort(rng.choice(np.arange(1, total), size=5, replace=False))
    return np.split(data, cuts)


@given(st.integers(0, 2**31 - 1))
@settings(max_examples=25, deadline=None)
def test_zfilter_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    chunks = _chunks(rng, 200, (3,))
    f = ZFilter((3,), clip=5.0)
    for c in chunks:
        f.update(c)
    data = np.concatenate(chunks)
    np.testing.assert_allclose(f.running_mean, data.mean(0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(f.running_std, data.std(0), rtol=1e-9)
    np.testing.assert_allclose(f.running_square_mean, (data**2).mean(0), rtol=1e-9)
    x = rng.normal(size=(7, 3)) * 20
    expected = np.clip((x - data.mean(0)) / (data.std(0) + f.eps), -5, 5)
    np.testing.assert_allclose(f.normalize(x), expected, rtol=1e-5, atol=1e-6)


@given(st.integers(0, 2**31 - 1))
@settings(max_examples=25, deadline=None)
def test_merge_equals_one_filter_over_both_streams(seed):
    rng = np.random.default_rng(seed)
    a_chunks, b_chunks = _chunks(rng, 100, (2,)), _chunks(rng, 150, (2,))
    a, b, both = ZFilter((2,)), ZFilter((2,)), ZFilter((2,))
    for c in a_chunks:
        a.update(c)
        both.update(c)
    for c in b_chunks:
        b.update(c)
        both.update(c)
    a.merge(b)
    assert a.count == both.count
    np.testing.assert_allclose(a.mean, both.mean, rtol=1e-10)
    np.testing.assert_allclose(a.var, both.var, rtol=1e-9)


def test_zfilter_clamps_at_five_sigma():
    f = ZFilter((1,))
    f.update(np.array([[-1.0], [1.0]]))
    assert f.normalize(np.array([1000.0]))[0] == pytest.approx(5.0)
    assert f.normalize(np.array([-1000.0]))[0] == pytest.approx(-5.0)


def test_zfilter_is_identity_before_data():
    f = ZFilter((2,))
    np.testing.assert_array_equal(f.normalize(np.array([3.0, -4.0])), [3.0, -4.0])


def test_arrays_roundtrip():
    f = ZFilter((2,))
    f.update(np.random.default_rng(0).normal(size=(10, 2)))
    g = ZFilter((2,))
    g.load_arrays(f.to_arrays("z"), "z")
    np.testing.assert_array_equal(g.mean, f.mean)
    np.testing.assert_array_equal(g.m2, f.m2)
    assert g.count == f.count


@given(st.integers(0, 2**31 - 1))
@settings(max_examples=25, deadline=None)
def test_reward_filter_matches_numpy(seed):
    """The original's defect: its sum of squares was overwritten, so the std drifted."""
    rng = np.random.default_rng(seed)
    rewards = [rng.normal(1.0, 3.0, size=rng.integers(1, 20)) for _ in range(10)]
    f = RewardFilter()
    for r in rewards:
        f.update(r)
    data = np.concatenate(rewards)
    assert f.mean == pytest.approx(data.mean())
    assert f.std == pytest.approx(data.std(), rel=1e-9)
    np.testing.assert_allclose(f.normalize(data), data / (data.std() + f.eps), rtol=1e-5)
    centred = RewardFilter(center=True)
    centred.merge(f)
    np.testing.assert_allclose(
        centred.normalize(data), (data - data.mean()) / (data.std() + f.eps), rtol=1e-4, atol=1e-5
    )


def test_single_values_update_like_a_batch():
    one_by_one, batch = RunningMeanStd(()), RunningMeanStd(())
    values = np.array([1.0, 5.0, -2.0, 8.0])
    for v in values:
        one_by_one.update(np.array(v))
    batch.update(values)
    assert one_by_one.mean == pytest.approx(batch.mean)
    assert one_by_one.var == pytest.approx(batch.var)
