"""Running observation and reward filters.

The learner owns the statistics and publishes them inside its parameters, so every agent normalizes
exactly as the learner does. Statistics are kept as (count, mean, M2) in float64 and combined with
Chan et al.'s parallel formula, which makes `merge` exact: merging the filters of two streams gives
the same result as one filter that saw both. (The original RewardFilter overwrote its sum of squares
on every update, so its variance drifted; here the update is the same merge as everywhere else.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from surreal_kube.rl.interfaces import ArrayDict


def _numpy(value: Any) -> np.ndarray:
    # Checkpoints hold tensors (weights_only loading), parameters hold arrays; accept both
    # without importing torch here.
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


class RunningMeanStd:
    """Mean and variance of a stream of arrays of a fixed shape, exactly mergeable."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.shape = tuple(shape)
        self.count = 0.0
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.m2 = np.zeros(self.shape, dtype=np.float64)

    def update(self, x: np.ndarray) -> None:
        """Add a batch: `x` has shape (N, *shape) (or `shape` itself for a single sample)."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape == self.shape:
            x = x[None]
        x = x.reshape((-1, *self.shape))
        n = x.shape[0]
        if n == 0:
            return
        mean = x.mean(axis=0)
        m2 = ((x - mean) ** 2).sum(axis=0)
        self._combine(float(n), mean, m2)

    def merge(self, other: RunningMeanStd) -> None:
        """Fold another stream's statistics into this one (exact)."""
        if other.shape != self.shape:
            raise ValueError(f"shape mismatch: {self.shape} vs {other.shape}")
        if other.count:
            self._combine(other.count, other.mean, other.m2)

    def _combine(self, n: float, mean: np.ndarray, m2: np.ndarray) -> None:
        total = self.count + n
        delta = mean - self.mean
        self.mean = np.asarray(self.mean + delta * (n / total), dtype=np.float64)
        self.m2 = np.asarray(self.m2 + m2 + delta**2 * (self.count * n / total), dtype=np.float64)
        self.count = total

    @property
    def var(self) -> np.ndarray:
        """Population variance (zero before any sample)."""
        if self.count == 0:
            return np.zeros(self.shape)
        return self.m2 / self.count

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation."""
        out: np.ndarray = np.sqrt(self.var)
        return out

    def to_arrays(self, prefix: str) -> ArrayDict:
        """The statistics as flat arrays (for parameters and checkpoints)."""
        return {
            f"{prefix}/count": np.array([self.count], dtype=np.float64),
            f"{prefix}/mean": np.array(self.mean, dtype=np.float64),
            f"{prefix}/m2": np.array(self.m2, dtype=np.float64),
        }

    def load_arrays(self, arrays: dict[str, Any], prefix: str) -> None:
        """Adopt statistics written by `to_arrays` (numpy arrays or tensors)."""
        self.count = float(_numpy(arrays[f"{prefix}/count"]).reshape(-1)[0])
        self.mean = _numpy(arrays[f"{prefix}/mean"]).astype(np.float64).reshape(self.shape)
        self.m2 = _numpy(arrays[f"{prefix}/m2"]).astype(np.float64).reshape(self.shape)


class ZFilter(RunningMeanStd):
    """Whitens observations with running statistics and clamps them at ±`clip` sigma.

    Clamping keeps a rare outlier (or the first few samples, when the variance estimate is poor)
    from saturating the network.
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 5.0, eps: float = 1e-5) -> None:
        super().__init__(shape)
        self.clip = float(clip)
        self.eps = float(eps)

    @property
    def running_mean(self) -> np.ndarray:
        """Current running mean (for metrics)."""
        return self.mean

    @property
    def running_square_mean(self) -> np.ndarray:
        """Current running mean of squares (for metrics)."""
        return self.var + self.mean**2

    @property
    def running_std(self) -> np.ndarray:
        """Current running standard deviation (for metrics)."""
        return self.std

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """(x - mean) / (std + eps), clamped to ±clip; identity before any statistics exist."""
        if self.count == 0:
            return np.asarray(x, dtype=np.float32)
        out = (np.asarray(x, dtype=np.float64) - self.mean) / (self.std + self.eps)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)

    def mean_std_f32(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and (std + eps) as float32, for normalizing on a torch device."""
        if self.count == 0:
            return np.zeros(self.shape, np.float32), np.ones(self.shape, np.float32)
        return self.mean.astype(np.float32), (self.std + self.eps).astype(np.float32)


class RewardFilter(RunningMeanStd):
    """Whitens rewards with their running standard deviation.

    By default rewards are only scaled, not centred: subtracting the mean reward would change which
    policy is optimal in episodic tasks (an 'alive' bonus becomes worthless). Pass `center=True`
    for full whitening.
    """

    def __init__(self, eps: float = 1e-8, center: bool = False, clip: float | None = None) -> None:
        super().__init__(())
        self.eps = float(eps)
        self.center = center
        self.clip = clip

    def normalize(self, rewards: np.ndarray) -> np.ndarray:
        """Rewards divided by the running std (and centred if configured)."""
        r = np.asarray(rewards, dtype=np.float64)
        if self.count == 0:
            return r.astype(np.float32)
        if self.center:
            r = r - self.mean
        r = r / (self.std + self.eps)
        if self.clip is not None:
            r = np.clip(r, -self.clip, self.clip)
        return r.astype(np.float32)


class FilterHistory:
    """The observation filters of the last few parameter versions, to whiten lagged data with.

    An agent acting with parameters of version v whitened its observations with the filter the
    learner published with them; the learner's own filter has moved on since (it takes each
    batch's steps in). Whitening a lagged step with the learner's current filter would feed the
    policy other inputs than those its behaviour log-probabilities were computed on, so the
    learner keeps the (mean, std) of each version it published and whitens every step with the
    filter of the version that acted. A version no longer (or never) kept falls back to the
    current filter, and is counted.
    """

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"a filter history keeps at least one version, got keep={keep}")
        self.keep = keep
        self._stats: dict[int, tuple[np.ndarray, np.ndarray, bool]] = {}

    def record(self, version: int, filt: ZFilter) -> None:
        """Remember the statistics `filt` has now as those of parameter version `version`."""
        mean, std = filt.mean_std_f32()
        self._stats[int(version)] = (mean, std, filt.count > 0)
        while len(self._stats) > self.keep:
            del self._stats[min(self._stats)]

    @property
    def versions(self) -> list[int]:
        """Versions kept, oldest first."""
        return sorted(self._stats)

    def whiten(
        self, x: np.ndarray, versions: np.ndarray, current: ZFilter
    ) -> tuple[np.ndarray, int]:
        """`x` (..., *shape) whitened per entry with the filter of `versions` (...).

        Returns the whitened float32 array and how many entries had a version not kept (those
        use `current`). An empty filter is the identity, unclipped, as in the actors.
        """
        lead = x.shape[: x.ndim - len(current.shape)]
        if versions.shape != lead:
            raise ValueError(f"versions {versions.shape} do not match observations {x.shape}")
        out = np.asarray(x, dtype=np.float32).copy()
        missed = 0
        for version in np.unique(versions):
            where = versions == version
            stats = self._stats.get(int(version))
            if stats is None:
                missed += int(where.sum())
                mean, std = current.mean_std_f32()
                filled = current.count > 0
            else:
                mean, std, filled = stats
            if filled:
                out[where] = np.clip((out[where] - mean) / std, -current.clip, current.clip)
        return out, missed

    def to_arrays(self, prefix: str) -> ArrayDict:
        """The kept statistics as flat arrays (for checkpoints)."""
        versions = self.versions
        return {
            f"{prefix}/versions": np.array(versions, dtype=np.int64),
            f"{prefix}/mean": np.stack([self._stats[v][0] for v in versions]),
            f"{prefix}/std": np.stack([self._stats[v][1] for v in versions]),
            f"{prefix}/filled": np.array([self._stats[v][2] for v in versions], dtype=np.bool_),
        }

    def load_arrays(self, arrays: dict[str, Any], prefix: str) -> None:
        """Adopt statistics written by `to_arrays` (numpy arrays or tensors)."""
        versions = _numpy(arrays[f"{prefix}/versions"]).reshape(-1)
        mean = _numpy(arrays[f"{prefix}/mean"]).astype(np.float32)
        std = _numpy(arrays[f"{prefix}/std"]).astype(np.float32)
        filled = _numpy(arrays[f"{prefix}/filled"]).reshape(-1)
        self._stats = {int(v): (mean[i], std[i], bool(filled[i])) for i, v in enumerate(versions)}
        while len(self._stats) > self.keep:
            del self._stats[min(self._stats)]
