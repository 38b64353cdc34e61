"""GAE against hand-worked values (see the arithmetic in each test)."""

import numpy as np
import pytest

from surreal_kube.rl.gae import discounted_nstep, gae, normalize_advantages

R = [1.0, 2.0, 3.0]
V = [0.5, 1.0, 1.5]
G, L = 0.9, 0.8


def test_gae_hand_worked_bootstrapped():
    # deltas: 1 + .9*1.0 - .5 = 1.4; 2 + .9*1.5 - 1 = 2.35; 3 + .9*2.0 - 1.5 = 3.3
    # A2 = 3.3; A1 = 2.35 + .72*3.3 = 4.726; A0 = 1.4 + .72*4.726 = 4.80272
    adv, ret = gae(R, V, 2.0, [0, 0, 0], G, L)
    np.testing.assert_allclose(adv, [4.80272, 4.726, 3.3], rtol=1e-6)
    np.testing.assert_allclose(ret, [5.30272, 5.726, 4.8], rtol=1e-6)


def test_gae_terminal_does_not_bootstrap():
    # delta2 = 3 - 1.5 = 1.5 (no bootstrap); A1 = 2.35 + .72*1.5 = 3.43; A0 = 1.4 + .72*3.43
    adv, _ = gae(R, V, 2.0, [0, 0, 1], G, L)
    np.testing.assert_allclose(adv, [3.8696, 3.43, 1.5], rtol=1e-6)


def test_gae_padding_bootstraps_after_last_valid_step():
    # Valid steps 0, 1; step 1's next value is the bootstrap 2.0:
    # delta1 = 2 + 1.8 - 1 = 2.8; A0 = 1.4 + .72*2.8 = 3.416; the padded step is zero.
    adv, ret = gae(R, V, 2.0, [0, 0, 0], G, L, mask=[1, 1, 0])
    np.testing.assert_allclose(adv, [3.416, 2.8, 0.0], rtol=1e-6)
    np.testing.assert_allclose(ret, [3.916, 3.8, 0.0], rtol=1e-6)


def test_lambda_one_is_discounted_return_with_bootstrap():
    _, ret = gae(R, V, 2.0, [0, 0, 0], G, 1.0)
    assert ret[0] == pytest.approx(1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 2.0)


def test_lambda_zero_is_td_error():
    adv, _ = gae(R, V, 2.0, [0, 0, 0], G, 0.0)
    np.testing.assert_allclose(adv, [1.4, 2.35, 3.3], rtol=1e-6)


def test_batched_rows_are_independent():
    rows = np.array([R, R[::-1]])
    values = np.array([V, V[::-1]])
    adv, _ = gae(rows, values, np.array([2.0, 0.0]), np.zeros((2, 3)), G, L)
    single0, _ = gae(R, V, 2.0, [0, 0, 0], G, L)
    single1, _ = gae(R[::-1], V[::-1], 0.0, [0, 0, 0], G, L)
    np.testing.assert_allclose(adv, np.stack([single0, single1]), rtol=1e-6)


def test_normalize_advantages_ignores_padding():
    adv = np.array([[1.0, 3.0, 100.0]], dtype=np.float32)
    out = normalize_advantages(adv, np.array([[1.0, 1.0, 0.0]]))
    np.testing.assert_allclose(out, [[-1.0, 1.0, 0.0]], atol=1e-6)


def test_discounted_nstep():
    assert discounted_nstep([1.0, 1.0, 1.0], 0.5) == pytest.approx(1.75)
