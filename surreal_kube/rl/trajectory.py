"""Cutting an agent's stream of steps into replay items.

PPO sends overlapping sub-trajectories: a window of `horizon` steps starts every `stride` steps
(25 and 20 by default). Each step is *owned* by exactly one window, the one that starts at or
before it by less than `stride` (`train_mask`); the `horizon - stride` steps after a window's owned
part only give its advantages a longer look-ahead before the bootstrap. So every step is trained on
once, and even the last owned step of a window sees at least `horizon - stride` real rewards.
Windows still open when an episode ends are sent padded (`mask` marks the valid prefix).

DDPG sends n-step transitions (obs, action, discounted reward sum, obs n steps later, discount).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from surreal_kube.rl.interfaces import ArrayDict


class SubTrajectoryWriter:
    """Turns per-step records into sub-trajectory items (see module docstring).

    Steps are written into preallocated arrays, one per key (allocated at the first step, from
    its shapes and dtypes), and a finished window is one slice copy of each: an agent's hot
    path does no per-step allocation and no stacking of per-step arrays. The arrays hold twice
    the horizon; when they fill, the rows still needed (from the oldest open window on, at
    most a horizon) move to the front.
    """

    def __init__(self, horizon: int, stride: int) -> None:
        if not 1 <= stride <= horizon:
            raise ValueError(f"need 1 <= stride <= horizon, got stride={stride}, horizon={horizon}")
        self.horizon = horizon
        self.stride = stride
        self.capacity = 2 * horizon
        self._rows: dict[str, np.ndarray] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the current episode (open windows are dropped, not sent)."""
        self._base = 0  # the episode step held in row 0
        self._t = 0  # episode steps recorded
        self._windows: list[tuple[int, ArrayDict]] = []

    @property
    def opens_window(self) -> bool:
        """Whether the next step starts a window (the agent then records e.g. its LSTM state)."""
        return self._t % self.stride == 0

    def add(
        self,
        step: ArrayDict,
        next_obs: ArrayDict,
        episode_end: bool,
        window_extras: ArrayDict | None = None,
    ) -> list[ArrayDict]:
        """Record one step; returns the items completed by it.

        Args:
            step: this step's arrays (obs/..., actions, rewards, terminals, ...).
            next_obs: the observation after this step, `bootstrap/...` keys (used when a window
                ends here).
            episode_end: terminated or truncated; every open window is sent and state reset.
            window_extras: stored once per window when this step opens one (e.g. rnn_h / rnn_c).
        """
        if not self._rows:
            self._allocate(step, next_obs)
        elif self._t - self._base == self.capacity:
            self._compact()
        self._write(self._t - self._base, step, next_obs)
        if self.opens_window:
            self._windows.append((self._t, dict(window_extras or {})))
        self._t += 1
        out = []
        still_open = []
        for start, extras in self._windows:
            if episode_end or self._t - start == self.horizon:
                out.append(self._emit(start, extras))
            else:
                still_open.append((start, extras))
        self._windows = still_open
        if episode_end:
            self.reset()
        return out

    def _allocate(self, step: ArrayDict, next_obs: ArrayDict) -> None:
        for key, value in (*step.items(), *next_obs.items()):
            value = np.asarray(value)
            self._rows[key] = np.zeros((self.capacity, *value.shape), dtype=value.dtype)
        self._step_keys = tuple(step)
        self._next_keys = tuple(next_obs)

    def _write(self, row: int, step: ArrayDict, next_obs: ArrayDict) -> None:
        if len(step) != len(self._step_keys) or len(next_obs) != len(self._next_keys):
            raise ValueError(
                f"a step with keys {sorted(step)} + {sorted(next_obs)}; this writer's steps have "
                f"{sorted(self._step_keys)} + {sorted(self._next_keys)}"
            )
        rows = self._rows
        try:
            for key, value in step.items():
                rows[key][row] = value
            for key, value in next_obs.items():
                rows[key][row] = value
        except KeyError as exc:
            raise ValueError(
                f"a step with key {exc}; this writer's steps have "
                f"{sorted(self._step_keys)} + {sorted(self._next_keys)}"
            ) from None

    def _compact(self) -> None:
        """Move the rows still needed (the oldest open window's on) to the front."""
        keep_from = min((s for s, _ in self._windows), default=self._t)
        lo, hi = keep_from - self._base, self._t - self._base
        for rows in self._rows.values():
            rows[: hi - lo] = rows[lo:hi]
        self._base = keep_from

    def _emit(self, start: int, extras: ArrayDict) -> ArrayDict:
        lo = start - self._base
        hi = min(start + self.horizon, self._t) - self._base
        n = hi - lo
        item: ArrayDict = {}
        for key in self._step_keys:
            rows = self._rows[key]
            if n == self.horizon:
                item[key] = rows[lo:hi].copy()
            else:  # an episode ended inside the window: zero padding after its steps
                padded = np.zeros((self.horizon, *rows.shape[1:]), dtype=rows.dtype)
                padded[:n] = rows[lo:hi]
                item[key] = padded
        mask = np.zeros(self.horizon, dtype=np.float32)
        mask[:n] = 1.0
        train_mask = np.zeros(self.horizon, dtype=np.float32)
        train_mask[: min(n, self.stride)] = 1.0
        item["mask"] = mask
        item["train_mask"] = train_mask
        for key in self._next_keys:
            item[key] = self._rows[key][hi - 1].copy()
        item.update(extras)
        return item


class NStepWriter:
    """Turns per-step records into n-step transitions.

    A time-limit truncation is not terminal: its transitions keep bootstrapping from the last
    observation, which is what makes returns of time-limited tasks unbiased.
    """

    def __init__(self, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = n
        self.gamma = gamma
        self._pending: deque[tuple[ArrayDict, np.ndarray, float]] = deque()

    def reset(self) -> None:
        """Drop pending steps (a new episode starts)."""
        self._pending.clear()

    def add(
        self,
        obs: ArrayDict,
        action: np.ndarray,
        reward: float,
        next_obs: ArrayDict,
        terminated: bool,
        truncated: bool,
    ) -> list[ArrayDict]:
        """Record a step; returns the transitions whose n steps (or episode) are complete.

        `obs` and `next_obs` carry their key prefixes already (`obs/...`, `next_obs/...`).
        """
        self._pending.append((obs, action, float(reward)))
        out = []
        if len(self._pending) == self.n:
            out.append(self._emit(next_obs, terminated))
            self._pending.popleft()
        if terminated or truncated:
            while self._pending:
                out.append(self._emit(next_obs, terminated))
                self._pending.popleft()
        return out

    def _emit(self, next_obs: ArrayDict, terminated: bool) -> ArrayDict:
        obs, action, _ = self._pending[0]
        rewards = np.array([r for _, _, r in self._pending])
        k = len(rewards)
        item: ArrayDict = dict(obs)
        item.update(next_obs)
        item["actions"] = np.asarray(action, dtype=np.float32)
        item["rewards"] = np.array(np.sum(rewards * self.gamma ** np.arange(k)), dtype=np.float32)
        item["terminals"] = np.array(float(terminated), dtype=np.float32)
        item["discounts"] = np.array(self.gamma**k, dtype=np.float32)
        return item
