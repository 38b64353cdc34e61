"""PPO and DDPG losses, distributions and adaptation rules."""

import numpy as np
import pytest
import torch
from torch.distributions import Categorical as TorchCategorical
from torch.distributions import Normal, kl_divergence

from surreal_kube.rl import losses
from surreal_kube.rl.distributions import Categorical, DiagGaussian


def test_clip_loss_by_hand():
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1]))
    adv = torch.tensor([1.0, -1.0, 2.0])
    loss, stats = losses.ppo_clip_loss(logp, torch.zeros(3), adv, 0.2)
    # min(1.5*1, 1.2*1)=1.2; min(.5*-1, .8*-1)=-.8; min(1.1*2, 1.1*2)=2.2 -> mean 0.8667
    assert float(loss) == pytest.approx(-(1.2 - 0.8 + 2.2) / 3, rel=1e-5)
    assert float(stats["clipfrac"]) == pytest.approx(2 / 3)


def test_clip_loss_respects_mask():
    logp = torch.log(torch.tensor([1.5, 100.0]))
    loss, _ = losses.ppo_clip_loss(
        logp, torch.zeros(2), torch.tensor([1.0, 1.0]), 0.2, torch.tensor([1.0, 0.0])
    )
    assert float(loss) == pytest.approx(-1.2, rel=1e-5)


def test_adapt_loss_cutoff_only_beyond_twice_target():
    logp = torch.zeros(2)
    adv = torch.tensor([1.0, 1.0])
    small, _ = losses.ppo_adapt_loss(logp, logp, adv, torch.full((2,), 0.02), 2.0, 0.015, 100.0)
    assert float(small) == pytest.approx(-1.0 + 2.0 * 0.02)
    big, _ = losses.ppo_adapt_loss(logp, logp, adv, torch.full((2,), 0.05), 2.0, 0.015, 100.0)
    assert float(big) == pytest.approx(-1.0 + 2.0 * 0.05 + 100.0 * (0.05 - 0.03) ** 2)


def test_explained_variance():
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert losses.explained_variance(target, target) == pytest.approx(1.0)
    assert losses.explained_variance(torch.full((4,), 2.5), target) == pytest.approx(0.0)


def test_adapt_within_bounds():
    # clip shrinks when KL is high, grows when low, clamped to bounds
    assert losses.adapt_within(
        0.2, 0.1, 0.015, (0.5, 2.0), 1.5, (0.05, 0.3), False
    ) == pytest.approx(0.2 / 1.5)
    assert losses.adapt_within(0.25, 0.001, 0.015, (0.5, 2.0), 1.5, (0.05, 0.3), False) == 0.3
    assert losses.adapt_within(0.2, 0.015, 0.015, (0.5, 2.0), 1.5, (0.05, 0.3), False) == 0.2
    # beta grows when KL is high
    assert losses.adapt_within(30.0, 1.0, 0.015, (0.5, 2.0), 1.5, (1 / 35, 35.0), True) == 35.0
    assert losses.adapt_within(
        1.0, 0.0, 0.015, (0.5, 2.0), 1.5, (1 / 35, 35.0), True
    ) == pytest.approx(1 / 1.5)


def test_gaussian_matches_torch_distributions():
    d = DiagGaussian(3)
    gen = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(5, 3, generator=gen), torch.randn(5, 3, generator=gen) * 0.3
    mean2, log_std2 = torch.randn(5, 3, generator=gen), torch.randn(5, 3, generator=gen) * 0.3
    a = torch.randn(5, 3, generator=gen)
    info, info2 = torch.cat([mean, log_std], -1), torch.cat([mean2, log_std2], -1)
    ref, ref2 = Normal(mean, log_std.exp()), Normal(mean2, log_std2.exp())
    torch.testing.assert_close(d.log_prob(info, a), ref.log_prob(a).sum(-1))
    torch.testing.assert_close(d.entropy(info), ref.entropy().sum(-1))
    torch.testing.assert_close(d.kl(info, info2), kl_divergence(ref, ref2).sum(-1))
    np.testing.assert_allclose(
        d.log_prob_np(info.numpy(), a.numpy()), ref.log_prob(a).sum(-1).numpy(), rtol=1e-5
    )


def test_categorical_matches_torch_distributions():
    d = Categorical(4)
    gen = torch.Generator().manual_seed(1)
    logits, logits2 = torch.randn(6, 4, generator=gen), torch.randn(6, 4, generator=gen)
    a = torch.randint(0, 4, (6,), generator=gen)
    ref, ref2 = TorchCategorical(logits=logits), TorchCategorical(logits=logits2)
    torch.testing.assert_close(d.log_prob(logits, a), ref.log_prob(a))
    torch.testing.assert_close(d.entropy(logits), ref.entropy())
    torch.testing.assert_close(d.kl(logits, logits2), kl_divergence(ref, ref2))
    np.testing.assert_allclose(
        d.log_prob_np(logits.numpy(), a.numpy()), ref.log_prob(a).numpy(), rtol=1e-5
    )


def test_numpy_sampling_frequencies():
    rng = np.random.default_rng(0)
    logits = np.log(np.array([0.1, 0.2, 0.7]))
    draws = Categorical(3).sample_np(np.tile(logits, (30_000, 1)), rng)
    np.testing.assert_allclose(np.bincount(draws) / 30_000, [0.1, 0.2, 0.7], atol=0.01)
    g = DiagGaussian(1)
    samples = g.sample_np(np.tile([2.0, np.log(0.5)], (30_000, 1)), rng)
    assert samples.mean() == pytest.approx(2.0, abs=0.02)
    assert samples.std() == pytest.approx(0.5, abs=0.02)


def test_td_targets_and_weighted_critic_loss():
    t = losses.td_targets(
        torch.tensor([1.0, 1.0]),
        torch.tensor([0.9, 0.9]),
        torch.tensor([0.0, 1.0]),
        torch.tensor([10.0, 10.0]),
    )
    torch.testing.assert_close(t, torch.tensor([10.0, 1.0]))
    loss = losses.critic_loss(
        torch.tensor([0.0, 0.0]), torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.5])
    )
    assert float(loss) == pytest.approx((1.0 + 0.5 * 4.0) / 2)


def test_decoupled_clip_gradient_is_as_derived():
    # d loss / d logp = -w * r * A / N where the unclipped term is the smaller one, else 0
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.7])).requires_grad_()
    ref_logp = torch.zeros(4)
    adv = torch.tensor([1.0, -1.0, 2.0, 1.0])
    weights = torch.tensor([0.5, 2.0, 1.5, 0.8])
    loss, _ = losses.ppo_clip_loss(logp, ref_logp, adv, 0.2, weights=weights)
    loss.backward()
    r = torch.exp(logp.detach() - ref_logp)
    # 1.5 > 1.2 with A > 0 and 0.5 < 0.8 with A < 0: the clipped term is the smaller, no gradient
    active = torch.tensor([0.0, 0.0, 1.0, 1.0])
    torch.testing.assert_close(logp.grad, -weights * r * adv * active / 4)
    assert loss.item() == pytest.approx(-(0.5 * 1.2 + 2.0 * -0.8 + 1.5 * 2.2 + 0.8 * 0.7) / 4)
