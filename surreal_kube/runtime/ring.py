"""Replay storage that takes whole stacked batches: preallocated per-key arrays used as a ring.

Experience arrives as messages of N items stacked along axis 0 (see `comm.experience`); storing
them item by item would cost N dict and array objects per message and dominate a shard's time.
Here a batch costs one `memcpy` per key, and a sample one slice (FIFO) or one gather (uniform)
per key. Items keep their own shape: transitions `(obs_dim,)` or sub-trajectories
`(horizon, obs_dim)` alike. The layout (keys, dtypes, item shapes) is given at construction,
computed from the environment's spaces (`runtime.layout`), never taken from a message: a batch
that does not fit is a `LayoutError` for the shard to count, and the storage is the size it will
be from the start.

Modes (ReplaySpec.kind): `fifo` hands out the oldest items and removes them (on-policy PPO);
`uniform` samples with replacement and keeps everything until overwritten (DDPG). Both drop the
oldest items when full. `prioritized` needs a sum tree and comes from the learning core
(`surreal_kube.rl.replay`, numpy-only so a shard never imports torch), wrapped by
`ItemBufferAdapter`. Why not the learning core's FIFO and uniform buffers too: on the shard's
path (whole stacked inserts, batched samples) this ring inserts and samples faster than
`UniformReplay`, and far faster than the item-wise `FIFOReplay` (`bench/comm.py` measures the
shard's path); the semantics are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

import numpy as np

from surreal_kube.runtime.layout import ItemLayout, LayoutError

ArrayDict = dict[str, np.ndarray]
__all__ = ["BatchStore", "ColumnarRing", "ItemBufferAdapter", "LayoutError"]


class BatchStore(Protocol):
    """What a replay shard needs from its storage."""

    def add_batch(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Insert `count` items stacked along axis 0."""

    def __len__(self) -> int:
        """Items held."""

    def sample(self, batch_size: int) -> ArrayDict:
        """A batch of `batch_size` items stacked along axis 0."""


class ColumnarRing:
    """A ring of `capacity` items of `layout` in per-key arrays, allocated at construction."""

    def __init__(
        self,
        capacity: int,
        layout: ItemLayout,
        mode: Literal["fifo", "uniform"] = "fifo",
        seed: int = 0,
    ):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if mode not in ("fifo", "uniform"):
            raise ValueError(f"mode must be 'fifo' or 'uniform', got {mode!r}")
        self.capacity = capacity
        self.mode = mode
        self.layout = layout
        self._rng = np.random.default_rng(seed)
        self._data: dict[str, np.ndarray] = layout.allocate(capacity)
        self._start = 0
        self._size = 0
        self.added = 0
        self.overwritten = 0
        """Items dropped unsampled because the ring was full."""

    def __len__(self) -> int:
        return self._size

    def add_batch(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Copy `count` stacked items in, dropping the oldest if the ring is full."""
        if count <= 0:
            return
        self.layout.check(arrays, count)
        offset = 0
        if count > self.capacity:  # only the newest `capacity` items can survive
            offset = count - self.capacity
            self.overwritten += offset
        n = count - offset
        end = (self._start + self._size) % self.capacity
        first = min(n, self.capacity - end)
        for k, v in arrays.items():
            dst = self._data[k]
            dst[end : end + first] = v[offset : offset + first]
            if first < n:
                dst[: n - first] = v[offset + first : count]
        overflow = max(0, self._size + n - self.capacity)
        self.overwritten += overflow
        self._start = (self._start + overflow) % self.capacity
        self._size = min(self.capacity, self._size + n)
        self.added += count

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

    def add(self, item: Mapping[str, Any]) -> None:
        """Insert one item (the `ReplayBuffer` interface)."""
        self.add_batch({k: np.asarray(v)[None] for k, v in item.items()}, 1)

    def sample(self, batch_size: int) -> ArrayDict:
        """FIFO: the oldest `batch_size` items, removed. Uniform: random items, kept."""
        if self._size == 0:
            raise LayoutError("the store is empty")
        if self.mode == "fifo":
            n = min(batch_size, self._size)
            idx = (self._start + np.arange(n)) % self.capacity
            if self._start + n <= self.capacity:
                out = {k: v[self._start : self._start + n].copy() for k, v in self._data.items()}
            else:
                out = {k: np.take(v, idx, axis=0) for k, v in self._data.items()}
            self._start = (self._start + n) % self.capacity
            self._size -= n
            return out
        idx = self._rng.integers(0, self._size, batch_size)
        if self._start:
            idx = (idx + self._start) % self.capacity
        # np.take is about twice as fast as fancy indexing for row gathers.
        return {k: np.take(v, idx, axis=0) for k, v in self._data.items()}


class ItemBufferAdapter:
    """Gives an item-wise `ReplayBuffer` (from `surreal_kube.rl`) the batch interface."""

    def __init__(self, buffer: Any, layout: ItemLayout) -> None:
        self.buffer = buffer
        self.layout = layout

    def add_batch(self, arrays: Mapping[str, np.ndarray], count: int) -> None:
        """Split the batch into items (views, no copies) and add them one by one."""
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
        return self.buffer.sample(batch_size)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Forward new priorities (prioritized replay only)."""
        update = getattr(self.buffer, "update_priorities", None)
        if update is not None:
            update(indices, priorities)
