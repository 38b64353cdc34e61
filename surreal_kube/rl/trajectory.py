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


def _pad(stack: np.ndarray, horizon: int) -> np.ndarray:
    if stack.shape[0] == horizon:
        return stack
    pad = np.zeros((horizon - stack.shape[0], *stack.shape[1:]), dtype=stack.dtype)
    return np.concatenate([stack, pad])


class SubTrajectoryWriter:
    """Turns per-step records into sub-trajectory items (see module docstring)."""

    def __init__(self, horizon: int, stride: int) -> None:
        if not 1 <= stride <= horizon:
            raise ValueError(f"need 1 <= stride <= horizon, got stride={stride}, horizon={horizon}")
        self.horizon = horizon
        self.stride = stride
        self.reset()

    def reset(self) -> None:
        """Forget the current episode (open windows are dropped, not sent)."""
        self._steps: list[ArrayDict] = []
        self._next_obs: list[ArrayDict] = []
        self._base = 0
        self._t = 0
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
        if self.opens_window:
            self._windows.append((self._t, dict(window_extras or {})))
        self._steps.append(step)
        self._next_obs.append(next_obs)
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
        keep_from = min((s for s, _ in self._windows), default=self._t)
        drop = keep_from - self._base
        if drop > 0:
            del self._steps[:drop]
            del self._next_obs[:drop]
            self._base = keep_from
        return out

    def _emit(self, start: int, extras: ArrayDict) -> ArrayDict:
        lo = start - self._base
        hi = min(start + self.horizon, self._t) - self._base
        steps = self._steps[lo:hi]
        n = len(steps)
        item = {k: _pad(np.stack([s[k] for s in steps]), self.horizon) for k in steps[0]}
        mask = np.zeros(self.horizon, dtype=np.float32)
        mask[:n] = 1.0
        train_mask = np.zeros(self.horizon, dtype=np.float32)
        train_mask[: min(n, self.stride)] = 1.0
        item["mask"] = mask
        item["train_mask"] = train_mask
        item.update(self._next_obs[hi - 1])
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
