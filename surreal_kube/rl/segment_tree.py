"""Segment trees for prioritized replay: O(log n) updates, range reductions and prefix search.

Stored as a flat array of 2 * capacity nodes (node 1 is the root, node i has children 2i and
2i + 1, leaves start at `capacity`), with `capacity` a power of two. Updates and prefix searches
are vectorized over many indices at once, which matters because a learner batch updates hundreds of
priorities per iteration and a Python loop per item would dominate the replay's time.
"""

from __future__ import annotations

import numpy as np


class SegmentTree:
    """A binary tree over `capacity` leaves, each node holding `operation` of its children."""

    def __init__(
        self,
        capacity: int,
        operation: np.ufunc,
        neutral: float,
    ) -> None:
        if capacity <= 0 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a positive power of 2, got {capacity}")
        self.capacity = capacity
        self._op = operation
        self._neutral = neutral
        self._tree = np.full(2 * capacity, neutral, dtype=np.float64)

    def __setitem__(self, idx: int | np.ndarray, value: float | np.ndarray) -> None:
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise IndexError(f"index out of range [0, {self.capacity})")
        value = np.broadcast_to(np.asarray(value, dtype=np.float64), idx.shape)
        # With duplicate indices numpy keeps the last assignment, as a loop would.
        nodes = idx + self.capacity
        self._tree[nodes] = value
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self._tree[nodes] = self._op(self._tree[2 * nodes], self._tree[2 * nodes + 1])
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def __getitem__(self, idx: int | np.ndarray) -> np.ndarray | float:
        idx = np.asarray(idx, dtype=np.int64)
        if np.any(idx < 0) or np.any(idx >= self.capacity):
            raise IndexError(f"index out of range [0, {self.capacity})")
        out = self._tree[idx + self.capacity]
        return float(out) if out.ndim == 0 else out

    def reduce(self, start: int = 0, end: int | None = None) -> float:
        """`operation` over the contiguous leaves [start, end) (end None: to the last leaf)."""
        if end is None:
            end = self.capacity
        if end < 0:
            end += self.capacity
        if not 0 <= start < end <= self.capacity:
            raise IndexError(f"bad range [{start}, {end}) for capacity {self.capacity}")
        result = self._neutral
        lo, hi = start + self.capacity, end + self.capacity
        while lo < hi:
            if lo & 1:
                result = float(self._op(result, self._tree[lo]))
                lo += 1
            if hi & 1:
                hi -= 1
                result = float(self._op(result, self._tree[hi]))
            lo //= 2
            hi //= 2
        return result


class SumSegmentTree(SegmentTree):
    """Sums over ranges, and the inverse: which leaf a cumulative mass falls into."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, np.add, 0.0)

    def sum(self, start: int = 0, end: int | None = None) -> float:
        """Sum of leaves [start, end)."""
        return self.reduce(start, end)

    def find_prefixsum_idx(self, mass: float | np.ndarray) -> np.ndarray:
        """Smallest leaf i with sum(leaves[0..i]) > mass, for each mass (vectorized).

        With masses drawn uniformly from [0, total) this picks leaf i with probability
        leaf_i / total exactly, which is what prioritized sampling needs. Leaves of zero value are
        never returned.
        """
        mass = np.array(mass, dtype=np.float64, ndmin=1)
        total = self._tree[1]
        if total <= 0:
            raise ValueError("cannot search an empty sum tree (all leaves are zero)")
        if np.any(mass < 0) or np.any(mass >= total):
            raise ValueError(f"mass must lie in [0, total={total})")
        nodes = np.ones(mass.shape, dtype=np.int64)
        while nodes[0] < self.capacity:
            left = 2 * nodes
            left_sum = self._tree[left]
            go_right = mass >= left_sum
            # Float rounding could send a search into an empty right subtree; stay left then.
            go_right &= self._tree[left + 1] > 0
            mass = np.where(go_right, mass - left_sum, mass)
            nodes = np.where(go_right, left + 1, left)
        return nodes - self.capacity


class MinSegmentTree(SegmentTree):
    """Minimums over ranges (the largest importance weight comes from the smallest priority)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, np.minimum, float("inf"))

    def min(self, start: int = 0, end: int | None = None) -> float:
        """Minimum of leaves [start, end)."""
        return self.reduce(start, end)
