"""Segment trees and prioritized replay: sums, minimums, prefix search, exact sampling."""

import numpy as np
import pytest

from surreal_kube.rl.replay import PrioritizedReplay
from surreal_kube.rl.segment_tree import MinSegmentTree, SumSegmentTree


def chi2_critical(dof: int, z: float = 3.09) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (z=3.09: 0.999)."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * np.sqrt(a)) ** 3


def test_sum_and_min_over_ranges_match_numpy():
    rng = np.random.default_rng(0)
    values = rng.random(16)
    s, m = SumSegmentTree(16), MinSegmentTree(16)
    s[np.arange(16)] = values
    m[np.arange(16)] = values
    for start in range(16):
        for end in range(start + 1, 17):
            assert s.sum(start, end) == pytest.approx(values[start:end].sum())
            assert m.min(start, end) == pytest.approx(values[start:end].min())


def test_updates_propagate_and_last_duplicate_wins():
    s = SumSegmentTree(8)
    s[[0, 1, 2]] = [1.0, 2.0, 3.0]
    s[1] = 10.0
    s[[5, 5]] = [4.0, 7.0]
    assert s.sum() == pytest.approx(1 + 10 + 3 + 7)
    assert s[5] == 7.0


def test_prefix_sum_search():
    s = SumSegmentTree(4)
    s[np.arange(4)] = [1.0, 0.0, 2.0, 1.0]
    # cumulative: [1, 1, 3, 4]: mass in [0,1) -> 0, [1,3) -> 2 (leaf 1 is empty), [3,4) -> 3
    found = s.find_prefixsum_idx(np.array([0.0, 0.5, 0.999, 1.0, 2.5, 3.0, 3.99]))
    np.testing.assert_array_equal(found, [0, 0, 0, 2, 2, 3, 3])
    with pytest.raises(ValueError):
        s.find_prefixsum_idx(4.0)


def test_capacity_must_be_power_of_two():
    with pytest.raises(ValueError):
        SumSegmentTree(6)


def test_prioritized_sampling_frequencies_match_priorities():
    k = 10
    replay = PrioritizedReplay(k, alpha=1.0, beta=0.5, seed=123)
    for i in range(k):
        replay.add({"x": np.array([i])})
    priorities = np.arange(1, k + 1, dtype=np.float64)
    replay.update_priorities(np.arange(k), priorities)
    n = 50_000
    idx = np.concatenate([replay.sample(500)["x"][:, 0] for _ in range(n // 500)])
    counts = np.bincount(idx, minlength=k)
    expected = n * (priorities + replay.eps) / (priorities + replay.eps).sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < chi2_critical(k - 1), (chi2, counts, expected)
    # Negative control: the same counts are nowhere near uniform.
    uniform = np.full(k, n / k)
    assert ((counts - uniform) ** 2 / uniform).sum() > 100 * chi2_critical(k - 1)


def test_alpha_flattens_priorities():
    replay = PrioritizedReplay(4, alpha=0.5, seed=0)
    for i in range(4):
        replay.add({"x": np.array(i)})
    replay.update_priorities(np.arange(4), np.array([1.0, 4.0, 9.0, 16.0]))
    idx = replay.sample_indices(40_000)
    freq = np.bincount(idx, minlength=4) / 40_000
    np.testing.assert_allclose(freq, np.array([1, 2, 3, 4]) / 10, atol=0.01)


def test_importance_weights():
    replay = PrioritizedReplay(4, alpha=1.0, beta=1.0, eps=0.0, seed=0)
    for i in range(4):
        replay.add({"x": np.array(i)})
    replay.update_priorities(np.arange(4), np.array([1.0, 1.0, 1.0, 5.0]))
    batch = replay.sample(64)
    p = np.array([1, 1, 1, 5]) / 8.0
    w = (4 * p) ** -1.0
    np.testing.assert_allclose(batch["weights"], (w / w.max())[batch["indices"]], rtol=1e-6)
    assert batch["weights"].max() == pytest.approx(1.0)


def test_new_items_get_max_priority():
    replay = PrioritizedReplay(4, alpha=1.0, seed=0)
    replay.add({"x": np.array(0)})
    replay.update_priorities(np.array([0]), np.array([7.0]))
    replay.add({"x": np.array(1)})
    assert replay._sum[1] == pytest.approx(replay._sum[0])
