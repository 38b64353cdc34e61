"""Replay buffers: FIFO (on-policy PPO), uniform ring buffer and prioritized proportional replay.

All three store flat `ArrayDict` items and return batches with every key stacked along a new
leading axis, so a replay shard never needs to know which algorithm produced the items. They are
numpy-only so the replay process does not import torch.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from surreal_kube.rl.interfaces import ArrayDict
from surreal_kube.rl.segment_tree import SumSegmentTree


def stack_items(items: list[ArrayDict]) -> ArrayDict:
    """Stack a list of items key by key along a new leading axis."""
    if not items:
        raise ValueError("cannot stack an empty list of items")
    keys = items[0].keys()
    for item in items[1:]:
        if item.keys() != keys:
            raise ValueError(f"items disagree on keys: {sorted(keys)} vs {sorted(item.keys())}")
    return {key: np.stack([item[key] for item in items]) for key in keys}


class FIFOReplay:
    """First in, first out; `sample` removes what it returns (each item is learned from once).

    On-policy PPO wants the freshest experience and never reuses it, so a full buffer drops its
    oldest items rather than blocking the agents.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[ArrayDict] = deque(maxlen=capacity)
        self.dropped = 0

    def add(self, item: ArrayDict) -> None:
        """Append an item (dropping the oldest when full)."""
        if len(self._items) == self.capacity:
            self.dropped += 1
        self._items.append(item)

    def __len__(self) -> int:
        return len(self._items)

    def sample(self, batch_size: int) -> ArrayDict:
        """Pop the `batch_size` oldest items as one batch."""
        if batch_size > len(self._items):
            raise ValueError(f"asked for {batch_size} items, only {len(self._items)} held")
        return stack_items([self._items.popleft() for _ in range(batch_size)])


class UniformReplay:
    """Ring buffer with uniform sampling (with replacement), preallocated on the first item.

    Storage is one contiguous array per key rather than a list of dicts: sampling a batch of 512
    transitions is then one fancy-indexing per key instead of 512 small stacks.
    """

    def __init__(self, capacity: int, seed: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._storage: ArrayDict = {}
        self._next = 0
        self._size = 0
        self._rng = np.random.default_rng(seed)

    def _allocate(self, item: ArrayDict) -> None:
        for key, value in item.items():
            value = np.asarray(value)
            self._storage[key] = np.zeros((self.capacity, *value.shape), dtype=value.dtype)

    def add(self, item: ArrayDict) -> int:
        """Store an item, overwriting the oldest when full; returns its slot."""
        if not self._storage:
            self._allocate(item)
        if item.keys() != self._storage.keys():
            raise ValueError(
                f"item keys {sorted(item.keys())} differ from stored {sorted(self._storage)}"
            )
        slot = self._next
        for key, value in item.items():
            self._storage[key][slot] = value
        self._next = (slot + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)
        return slot

    def add_batch(self, arrays: ArrayDict, count: int) -> np.ndarray:
        """Store `count` items given stacked (as the wire delivers them); returns their slots."""
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        if not self._storage:
            self._allocate({k: np.asarray(v)[0] for k, v in arrays.items()})
        if arrays.keys() != self._storage.keys():
            raise ValueError(
                f"item keys {sorted(arrays.keys())} differ from stored {sorted(self._storage)}"
            )
        if count > self.capacity:  # only the newest `capacity` items can be kept
            arrays = {k: np.asarray(v)[count - self.capacity : count] for k, v in arrays.items()}
            self._next = (self._next + count - self.capacity) % self.capacity
            count = self.capacity
        slots = (self._next + np.arange(count)) % self.capacity
        for key, value in arrays.items():
            self._storage[key][slots] = np.asarray(value)[:count]
        self._next = int((self._next + count) % self.capacity)
        self._size = min(self._size + count, self.capacity)
        return slots

    def __len__(self) -> int:
        return self._size

    def gather(self, indices: np.ndarray) -> ArrayDict:
        """The items at `indices`, stacked."""
        return {key: value[indices] for key, value in self._storage.items()}

    def sample(self, batch_size: int) -> ArrayDict:
        """`batch_size` items drawn uniformly with replacement."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay")
        return self.gather(self._rng.integers(0, self._size, size=batch_size))


class PrioritizedReplay(UniformReplay):
    """Proportional prioritized replay (Schaul et al. 2016) on sum and min segment trees.

    Item i is drawn with probability p_i^alpha / sum_j p_j^alpha, i.i.d. across the batch (masses
    drawn uniformly from [0, total), not stratified, so the distribution is exactly proportional).
    Batches carry `indices` (to update priorities after learning) and `weights`, the importance
    weights (N * P(i))^-beta divided by the largest weight in the batch (as Dopamine and Acme
    do). Dividing by the buffer's worst case instead (the weight of its least likely item) lets one
    item with a near-zero priority shrink every weight of every batch towards zero, and the
    critic's effective learning rate with it. New items get the largest priority seen so that each
    is sampled at least once soon.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity, seed)
        tree_capacity = 1
        while tree_capacity < capacity:
            tree_capacity *= 2
        self.alpha = alpha
        self.beta = beta
        self.eps = eps
        self._sum = SumSegmentTree(tree_capacity)
        self._max_priority = 1.0

    def add(self, item: ArrayDict) -> int:
        """Store an item with the current maximum priority."""
        slot = super().add(item)
        p = self._max_priority**self.alpha
        self._sum[slot] = p
        return slot

    def add_batch(self, arrays: ArrayDict, count: int) -> np.ndarray:
        """Store stacked items, each with the current maximum priority."""
        slots = super().add_batch(arrays, count)
        p = self._max_priority**self.alpha
        self._sum[slots] = p
        return slots

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Indices drawn with probability proportional to priority^alpha."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay")
        total = self._sum.sum(0, self._size)
        masses = self._rng.random(batch_size) * total
        masses = np.minimum(masses, np.nextafter(total, 0))
        out: np.ndarray = np.minimum(self._sum.find_prefixsum_idx(masses), self._size - 1)
        return out

    def sample(self, batch_size: int, beta: float | None = None) -> ArrayDict:
        """A batch plus `indices` and importance `weights` (float32)."""
        beta = self.beta if beta is None else beta
        idx = self.sample_indices(batch_size)
        total = self._sum.sum(0, self._size)
        p = np.asarray(self._sum[idx]) / total
        weights = (p * self._size) ** (-beta)
        weights = weights / weights.max()
        batch = self.gather(idx)
        batch["indices"] = idx.astype(np.int64)
        batch["weights"] = weights.astype(np.float32)
        return batch

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set new priorities (e.g. |TD error|) for sampled items."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        priorities = np.abs(np.asarray(priorities, dtype=np.float64).reshape(-1)) + self.eps
        if indices.shape != priorities.shape:
            raise ValueError("indices and priorities must have the same length")
        if indices.size and (indices.min() < 0 or indices.max() >= self._size):
            raise IndexError(f"priority index out of range [0, {self._size})")
        p = priorities**self.alpha
        self._sum[indices] = p
        self._max_priority = max(self._max_priority, float(priorities.max(initial=0.0)))


class SampleToInsertRatio:
    """Holds the ratio of items sampled to items inserted near a target, as Reverb's limiter.

    With a target of `samples_per_insert` (SPI), every inserted item should be drawn SPI times on
    average: DDPG's learner should not fall behind agents that outrun it (with two agents and no
    limiter it drew only a few per item, where TD3 as usually run draws about 256), and PPO's
    should take each sub-trajectory about once, while it is fresh. The limiter keeps
    `inserted * SPI - sampled` within `tolerance` items' worth (tolerance * SPI samples) of
    `center * SPI` (`center` defaults to `min_size`, as Reverb's; an on-policy shard places it
    lower, see `ExperimentSpec.rate_limit`): inserts wait when they are ahead, samples wait when
    they are ahead, and until `min_size` items arrived only inserts go. Items that leave the
    store without being sampled (an on-policy store drops stale ones) are `forget`-ten, so they
    do not hold inserts back forever. `samples_per_insert <= 0` turns the limiter off (only
    `min_size` holds).

    `tolerance` must leave room for a whole batch between the two limits, or neither side could
    ever move: `(2 * tolerance - 1) * SPI >= batch_size`.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size: int,
        tolerance: float,
        batch_size: int = 1,
        *,
        center: float | None = None,
    ) -> None:
        if min_size < 1:
            raise ValueError(f"min_size must be >= 1, got {min_size}")
        spi = float(samples_per_insert)
        if spi > 0 and (2 * tolerance - 1) * spi < batch_size:
            need = (batch_size / spi + 1) / 2
            raise ValueError(
                f"a tolerance of {tolerance} items at {spi} samples per insert leaves no room for "
                f"a batch of {batch_size}: it must be >= {need:g}"
            )
        self.samples_per_insert = spi
        self.min_size = int(min_size)
        self.tolerance = float(tolerance)
        self.center = float(min_size if center is None else center)
        self.inserted = 0
        self.sampled = 0
        self.forgotten = 0

    @property
    def enabled(self) -> bool:
        """Whether a ratio is enforced (beyond `min_size`)."""
        return self.samples_per_insert > 0

    def _diff(self) -> float:
        return (self.inserted - self.forgotten) * self.samples_per_insert - self.sampled

    def can_insert(self, count: int = 1) -> bool:
        """Whether `count` more items may go in now."""
        if not self.enabled:
            return True
        spi = self.samples_per_insert
        return self._diff() + count * spi <= (self.center + self.tolerance) * spi

    def can_sample(self, batch_size: int) -> bool:
        """Whether a batch of `batch_size` may be drawn now."""
        if self.inserted - self.forgotten < self.min_size:
            return False
        if not self.enabled:
            return True
        spi = self.samples_per_insert
        return self._diff() - batch_size >= (self.center - self.tolerance) * spi

    def insert(self, count: int = 1) -> None:
        """Count `count` items inserted."""
        self.inserted += int(count)

    def sample(self, batch_size: int) -> None:
        """Count one batch of `batch_size` drawn."""
        self.sampled += int(batch_size)

    def forget(self, count: int) -> None:
        """Count `count` items that left the store unsampled (stale or overwritten)."""
        self.forgotten += int(count)

    @property
    def achieved(self) -> float:
        """Samples drawn per item inserted so far (nan before any insert)."""
        return self.sampled / self.inserted if self.inserted else float("nan")
