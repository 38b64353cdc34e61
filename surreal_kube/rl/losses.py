"""Loss functions of PPO and DDPG as pure torch functions, importable and unit-testable.

Every function takes a `mask` (1 for valid steps, 0 for padding) where sequences are involved, so
that padded sub-trajectories never leak into a gradient or a statistic.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of x over the entries where mask is 1 (all entries when mask is None)."""
    if mask is None:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_clip_loss(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_epsilon: float,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (negated, to minimize), decoupled when `weights` are given.

    The ratio r = pi / pi_ref is clipped around the reference policy (the policy at the
    iteration's start: one trust-region centre, the same one the KL figures use), and each step's
    term is weighted by `weights` = pi_ref / pi_behaviour (truncated by the caller): the
    importance weight of data acted with older parameters (Hilton et al. 2021, "Batch size-
    invariance for policy optimization"). Untruncated, weights * r = pi / pi_behaviour, so the
    gradient is the off-policy surrogate's; without lag the weights are 1 and this is PPO.

        loss = -mean(w * min(r * A, clip(r, 1 - eps, 1 + eps) * A))
        d loss / d logp = -w * r * A / N where the unclipped term is the smaller one, else 0
    """
    ratio = torch.exp(logp - ref_logp)
    surr = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon) * advantages
    objective = torch.min(surr, clipped)
    if weights is not None:
        objective = weights.detach() * objective
    loss = -masked_mean(objective, mask)
    with torch.no_grad():
        stats = {
            "surrogate": masked_mean(surr, mask),
            "clipped_surrogate": masked_mean(clipped, mask),
            "clipfrac": masked_mean(((ratio - 1.0).abs() > clip_epsilon).float(), mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def ppo_adapt_loss(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    kl: torch.Tensor,
    beta: float,
    kl_target: float,
    kl_cutoff_coeff: float,
    mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Adaptive-KL objective: -surrogate + beta * KL + cutoff * max(0, KL - 2 * target)^2.

    The surrogate is w * pi / pi_ref * A with the same weights as `ppo_clip_loss` (so the
    reference policy is the one centre of the KL terms and of the ratio). The quadratic cutoff
    term (Heess et al. 2017) pulls hard when the policy runs far past the trust region, which the
    linear beta term alone adapts to too slowly.
    """
    ratio = torch.exp(logp - ref_logp)
    terms = ratio * advantages
    if weights is not None:
        terms = weights.detach() * terms
    surr = masked_mean(terms, mask)
    kl_mean = masked_mean(kl, mask)
    cutoff = torch.clamp(kl_mean - 2.0 * kl_target, min=0.0).pow(2)
    loss = -surr + beta * kl_mean + kl_cutoff_coeff * cutoff
    with torch.no_grad():
        stats = {
            "surrogate": surr.detach(),
            "kl_penalty": beta * kl_mean.detach(),
            "kl_cutoff": cutoff.detach(),
        }
    return loss, stats


def value_loss(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean squared error of the critic against the (lambda) returns."""
    return masked_mean((values - returns).pow(2), mask)


def explained_variance(
    predicted: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None
) -> float:
    """1 - Var(target - predicted) / Var(target): 1 is perfect, 0 no better than a constant."""
    if mask is None:
        mask = torch.ones_like(target)
    n = mask.sum().clamp(min=1.0)
    t_mean = (target * mask).sum() / n
    var_t = (((target - t_mean) * mask) ** 2).sum() / n
    resid = (target - predicted) * mask
    r_mean = resid.sum() / n
    var_r = (((resid - r_mean) * mask) ** 2).sum() / n
    if float(var_t) == 0.0:
        return float("nan")
    return float(1.0 - var_r / var_t)


def adapt_within(
    value: float,
    kl: float,
    kl_target: float,
    thresholds: tuple[float, float],
    factor: float,
    bounds: tuple[float, float],
    grow_when_kl_high: bool,
) -> float:
    """Multiply or divide `value` by `factor` when KL leaves [lo, hi] * target, within bounds.

    The KL penalty beta grows when KL is too high; the clip range shrinks then. Both directions
    use this one rule (`grow_when_kl_high` picks which).
    """
    lo, hi = thresholds
    if kl > hi * kl_target:
        value = value * factor if grow_when_kl_high else value / factor
    elif kl < lo * kl_target:
        value = value / factor if grow_when_kl_high else value * factor
    return float(min(max(value, bounds[0]), bounds[1]))


def td_targets(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    terminals: torch.Tensor,
    next_q: torch.Tensor,
) -> torch.Tensor:
    """n-step targets r + gamma^k * (1 - terminal) * Q'(s_{t+k}, pi'(s_{t+k}))."""
    return rewards + discounts * (1.0 - terminals) * next_q


def critic_loss(
    q: torch.Tensor, target: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """(Importance-weighted) squared TD error."""
    err = (q - target).pow(2)
    if weights is not None:
        err = err * weights
    return err.mean()
