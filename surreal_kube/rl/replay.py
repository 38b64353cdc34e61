"""Replay storage, one for the in-process trainer and for the replay shards: a columnar ring.

Items are kept in preallocated per-key arrays used as a ring. Experience reaches a shard as
messages of N items stacked along axis 0 (see `comm.experience`); storing them item by item
would cost N dict and array objects per message and dominate a shard's time. Here a batch costs
one `memcpy` per key, and a sample one slice (FIFO) or one gather (uniform) per key. Items keep
their own shape: transitions `(obs_dim,)` or sub-trajectories `(horizon, obs_dim)` alike; every
batch comes back with each key stacked along a new leading axis, so the storage never needs to
know which algorithm produced the items.

The layout (keys, dtypes, item shapes) decides what may go in. A replay shard gives it at
construction, computed from the environment's spaces (`runtime.layout.ItemLayout`), never taken
from a message: a batch that does not fit raises its `LayoutError` for the shard to count, and
the storage is the size it will be from the start. The in-process trainer, whose items come from
its own actors, gives none: the first item sets the layout, later items must have its keys and
are cast as numpy assigns (`FirstItemLayout`).

Modes (ReplaySpec.kind): `fifo` hands out the oldest items and removes them (on-policy PPO);
`uniform` samples with replacement and keeps everything until overwritten (DDPG); both drop the
oldest items when full. `prioritized` adds a sum tree over the ring's slots. Numpy only, so a
replay shard never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from surreal_kube.rl.interfaces import ArrayDict
from surreal_kube.rl.segment_tree import SumSegmentTree

Mode = Literal["fifo", "uniform"]


def stack_items(items: list[ArrayDict]) -> ArrayDict:
    """Stack a list of items key by key along a new leading axis."""
    if not items:
        raise ValueError("cannot stack an empty list of items")
    keys = items[0].keys()
    for item in items[1:]:
        if item.keys() != keys:
            raise ValueError(f"items disagree on keys: {sorted(keys)} vs {sorted(item.keys())}")
    return {key: np.stack([item[key] for item in items]) for key in keys}


class Layout(Protocol):
    """What the storage needs of an item layout (`runtime.layout.ItemLayout` is the strict one)."""

    def check(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Raise (a ValueError) unless `arrays` are `count` stacked items the storage takes."""

    def allocate(self, capacity: int) -> dict[str, np.ndarray]:
        """Per-key arrays for `capacity` items."""


@dataclass(frozen=True)
class FirstItemLayout:
    """The layout of the first item stored, for a trainer that gives none: keys are held to it,
    values cast as numpy assigns (its items come from its own actors, not from strangers)."""

    fields: Mapping[str, tuple[np.dtype, tuple[int, ...]]]

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> FirstItemLayout:
        """The layout of one (unstacked) item."""
        arrays = {k: np.asarray(v) for k, v in item.items()}
        return cls({k: (v.dtype, v.shape) for k, v in arrays.items()})

    def check(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Raise ValueError unless `arrays` has exactly the first item's keys."""
        if arrays.keys() != self.fields.keys():
            raise ValueError(
                f"item keys {sorted(arrays.keys())} differ from stored {sorted(self.fields)}"
            )

    def allocate(self, capacity: int) -> dict[str, np.ndarray]:
        """Zeroed per-key arrays (pages are taken as they fill)."""
        return {k: np.zeros((capacity, *shape), dtype) for k, (dtype, shape) in self.fields.items()}


class BatchStore(Protocol):
    """What a replay shard needs from its storage."""

    def add_batch(self, arrays: Mapping[str, np.ndarray], count: int) -> object:
        """Insert `count` items stacked along axis 0."""

    def __len__(self) -> int:
        """Items held."""

    def sample(self, batch_size: int) -> ArrayDict:
        """A batch of `batch_size` items stacked along axis 0."""


class ColumnarRing:
    """A ring of `capacity` items in per-key arrays: the one replay storage (module docstring).

    With a `layout` the arrays are allocated at construction and every batch is checked against
    it; without one, the first item sets it (`FirstItemLayout`). A slot is where an item stays
    until it is overwritten or removed; inserts land where adding the items one by one would put
    them, so a batch and its items one by one leave the same ring.
    """

    def __init__(
        self,
        capacity: int,
        layout: Layout | None = None,
        mode: Mode = "fifo",
        seed: int | None = 0,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if mode not in ("fifo", "uniform"):
            raise ValueError(f"mode must be 'fifo' or 'uniform', got {mode!r}")
        self.capacity = capacity
        self.mode = mode
        self.layout = layout
        self._rng = np.random.default_rng(seed)
        self._data: dict[str, np.ndarray] = {} if layout is None else layout.allocate(capacity)
        self._start = 0
        """The slot of the oldest item held."""
        self._size = 0
        self.added = 0
        self.overwritten = 0
        """Items dropped unsampled because the ring was full."""

    def __len__(self) -> int:
        return self._size

    def _adopt(self, first: Mapping[str, Any]) -> Layout:
        """Take the layout of the first item (no layout was given) and allocate for it."""
        self.layout = FirstItemLayout.of(first)
        self._data = self.layout.allocate(self.capacity)
        return self.layout

    def add_batch(self, arrays: Mapping[str, np.ndarray], count: int) -> np.ndarray:
        """Copy `count` stacked items in, dropping the oldest if the ring is full; their slots."""
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        layout = self.layout or self._adopt({k: np.asarray(v)[0] for k, v in arrays.items()})
        layout.check(arrays, count)
        capacity = self.capacity
        end = (self._start + self._size) % capacity
        offset = 0
        if count > capacity:  # only the newest `capacity` items can survive
            offset = count - capacity
            end = (end + offset) % capacity
        n = count - offset
        first = min(n, capacity - end)
        for k, v in arrays.items():
            if not isinstance(v, np.ndarray):
                v = np.asarray(v)
            dst = self._data[k]
            dst[end : end + first] = v[offset : offset + first]
            if first < n:
                dst[: n - first] = v[offset + first : count]
        self._advance(end + n, n, dropped=offset)
        self.added += count
        if first == n:
            return np.arange(end, end + n)
        return np.concatenate((np.arange(end, capacity), np.arange(n - first)))

    def add(self, item: Mapping[str, Any]) -> int:
        """Insert one item (the `ReplayBuffer` interface); its slot."""
        layout = self.layout or self._adopt(item)
        if isinstance(layout, FirstItemLayout):  # its check reads the keys only
            layout.check(item, 1)
        else:
            layout.check({k: np.asarray(v)[None] for k, v in item.items()}, 1)
        slot = (self._start + self._size) % self.capacity
        for k, v in item.items():
            self._data[k][slot] = v
        self._advance(slot + 1, 1)
        self.added += 1
        return slot

    def _advance(self, end: int, n: int, dropped: int = 0) -> None:
        """Count `n` items written up to slot `end` (exclusive; `dropped` never got in)."""
        self.overwritten += dropped + max(0, self._size + n - self.capacity)
        self._size = min(self.capacity, self._size + n)
        self._start = (end - self._size) % self.capacity

    def discard_oldest_below(self, key: str, minimum: int) -> int:
        """Drop items from the oldest end while their `key` is below `minimum`; how many.

        For on-policy replay: items arrive roughly in the order of their parameter version, so
        the stale ones are at the oldest end (a stale item behind a fresh one is caught by the
        learner, which checks every item it gets).
        """
        if key not in self._data or self._size == 0:
            return 0
        held = self._data[key][(self._start + np.arange(self._size)) % self.capacity]
        fresh = held.reshape(self._size, -1).min(axis=1) >= minimum
        n = int(np.argmax(fresh)) if fresh.any() else self._size
        self._start = (self._start + n) % self.capacity
        self._size -= n
        return n

    def gather(self, slots: np.ndarray) -> ArrayDict:
        """The items at `slots`, stacked (np.take is about twice as fast as fancy indexing)."""
        return {k: np.take(v, slots, axis=0) for k, v in self._data.items()}

    def sample(self, batch_size: int) -> ArrayDict:
        """FIFO: the oldest `batch_size` items (at most what is held), removed. Uniform:
        `batch_size` items drawn with replacement, kept."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay")
        if self.mode == "fifo":
            n = min(batch_size, self._size)
            start = self._start
            if start + n <= self.capacity:
                out = {k: v[start : start + n].copy() for k, v in self._data.items()}
            else:
                out = self.gather((start + np.arange(n)) % self.capacity)
            self._start = (start + n) % self.capacity
            self._size -= n
            return out
        idx = self._rng.integers(0, self._size, batch_size)
        if self._start and self._size < self.capacity:  # the items held wrap around the end
            idx = (idx + self._start) % self.capacity
        return self.gather(idx)


class FIFOReplay(ColumnarRing):
    """First in, first out; `sample` removes what it returns (each item is learned from once).

    On-policy PPO wants the freshest experience and never reuses it, so a full buffer drops its
    oldest items rather than blocking the agents.
    """

    def __init__(self, capacity: int, layout: Layout | None = None) -> None:
        super().__init__(capacity, layout, "fifo")

    @property
    def dropped(self) -> int:
        """Items dropped unlearned because the buffer was full."""
        return self.overwritten

    def sample(self, batch_size: int) -> ArrayDict:
        """Pop the `batch_size` oldest items as one batch (all of them or none)."""
        if batch_size > self._size:
            raise ValueError(f"asked for {batch_size} items, only {self._size} held")
        return super().sample(batch_size)


class UniformReplay(ColumnarRing):
    """A ring with uniform sampling (with replacement).

    Storage is one contiguous array per key rather than a list of dicts: sampling a batch of 512
    transitions is then one gather per key instead of 512 small stacks.
    """

    def __init__(
        self, capacity: int, seed: int | None = None, layout: Layout | None = None
    ) -> None:
        super().__init__(capacity, layout, "uniform", seed)


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
        layout: Layout | None = None,
    ) -> None:
        super().__init__(capacity, seed, layout)
        tree_capacity = 1
        while tree_capacity < capacity:
            tree_capacity *= 2
        self.alpha = alpha
        self.beta = beta
        self.eps = eps
        self._sum = SumSegmentTree(tree_capacity)
        self._max_priority = 1.0

    def add(self, item: Mapping[str, Any]) -> int:
        """Store an item with the current maximum priority."""
        slot = super().add(item)
        self._sum[slot] = self._max_priority**self.alpha
        return slot

    def add_batch(self, arrays: Mapping[str, np.ndarray], count: int) -> np.ndarray:
        """Store stacked items, each with the current maximum priority."""
        slots = super().add_batch(arrays, count)
        p = self._max_priority**self.alpha
        self._sum[slots] = p
        return slots

    def discard_oldest_below(self, key: str, minimum: int) -> int:
        """Nothing: prioritized replay keeps its items until they are overwritten (its sum tree
        covers slots 0 to len - 1), whatever their version."""
        return 0

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


class ItemBufferAdapter:
    """Gives a replay buffer without a layout of its own the checks of a shard's `layout`."""

    def __init__(self, buffer: Any, layout: Layout) -> None:
        self.buffer = buffer
        self.layout = layout

    def add_batch(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Check the batch against the layout, then hand it to the buffer (item by item when
        it takes no batches: views, no copies)."""
        self.layout.check(arrays, count)
        extend = getattr(self.buffer, "add_batch", None)
        if callable(extend):
            extend(arrays, count)
            return
        for i in range(count):
            self.buffer.add({k: v[i] for k, v in arrays.items()})

    def __len__(self) -> int:
        return len(self.buffer)

    def sample(self, batch_size: int) -> ArrayDict:
        """The wrapped buffer's sample."""
        out: ArrayDict = self.buffer.sample(batch_size)
        return out

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Forward new priorities (prioritized replay only)."""
        update = getattr(self.buffer, "update_priorities", None)
        if update is not None:
            update(indices, priorities)


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
