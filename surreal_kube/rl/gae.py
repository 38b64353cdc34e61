"""Generalized advantage estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).

A pure numpy function so it can be unit-tested against hand-worked values and reused by any
algorithm. It works on a batch of fixed-length sub-trajectories whose valid steps are a prefix
(`mask`), each with the value of the observation that follows its last valid step (the bootstrap).
"""

from __future__ import annotations

import numpy as np


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_values: np.ndarray | float,
    terminals: np.ndarray,
    gamma: float,
    lam: float,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and lambda-returns of sub-trajectories.

    Args:
        rewards, values, terminals: shape (B, T) or (T,). `terminals[t]` is 1 when step t ended
            the episode for real (a time-limit truncation is not terminal: it still bootstraps).
        bootstrap_values: shape (B,) or scalar: V(s) of the observation after the last valid step.
        gamma, lam: discount and GAE lambda (lam=1 gives Monte-Carlo returns with bootstrap,
            lam=0 the one-step TD error).
        mask: shape like rewards, 1 for valid steps (a prefix of each row), 0 for padding.

    Returns:
        (advantages, returns), float32, zero on padding; returns = advantages + values is the
        N-step (lambda) return the critic regresses on.
    """
    squeeze = np.ndim(rewards) == 1
    r = np.atleast_2d(np.asarray(rewards, dtype=np.float64))
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    term = np.atleast_2d(np.asarray(terminals, dtype=np.float64))
    m = np.ones_like(r) if mask is None else np.atleast_2d(np.asarray(mask, dtype=np.float64))
    boot = np.broadcast_to(
        np.asarray(bootstrap_values, dtype=np.float64).reshape(-1), (r.shape[0],)
    )
    if not (r.shape == v.shape == term.shape == m.shape):
        raise ValueError(f"shape mismatch: {r.shape} {v.shape} {term.shape} {m.shape}")
    horizon = r.shape[1]
    # Value of the next state: the next step's value inside the valid prefix, the bootstrap value
    # after the last valid step.
    next_mask = np.concatenate([m[:, 1:], np.zeros((r.shape[0], 1))], axis=1)
    shifted = np.concatenate([v[:, 1:], np.zeros((r.shape[0], 1))], axis=1)
    next_v = np.where(next_mask > 0, shifted, boot[:, None])
    not_done = 1.0 - term
    delta = r + gamma * not_done * next_v - v
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[0])
    for t in reversed(range(horizon)):
        last = delta[:, t] + gamma * lam * not_done[:, t] * next_mask[:, t] * last
        adv[:, t] = last
    adv *= m
    ret = (adv + v) * m
    if squeeze:
        return adv[0].astype(np.float32), ret[0].astype(np.float32)
    return adv.astype(np.float32), ret.astype(np.float32)


def normalize_advantages(
    adv: np.ndarray, mask: np.ndarray | None = None, eps: float = 1e-8
) -> np.ndarray:
    """Zero mean, unit std over the valid steps (padding stays zero)."""
    m = np.ones_like(adv) if mask is None else np.asarray(mask, dtype=adv.dtype)
    n = max(float(m.sum()), 1.0)
    mean = float((adv * m).sum() / n)
    std = float(np.sqrt((((adv - mean) * m) ** 2).sum() / n))
    out: np.ndarray = ((adv - mean) / (std + eps) * m).astype(np.float32)
    return out


def discounted_nstep(rewards: np.ndarray, gamma: float) -> float:
    """sum_k gamma^k r_k: the reward part of an n-step return."""
    r = np.asarray(rewards, dtype=np.float64)
    return float(np.sum(r * gamma ** np.arange(len(r))))
