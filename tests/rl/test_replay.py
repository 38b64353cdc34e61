"""FIFO and uniform replay buffers, stacking, and batched inserts."""

import numpy as np
import pytest

from surreal_kube.rl.replay import (
    ColumnarRing,
    FIFOReplay,
    PrioritizedReplay,
    UniformReplay,
    stack_items,
)


def item(i: int) -> dict:
    return {"x": np.array([i, i], np.float32), "y": np.array(i, np.int64)}


def test_stack_items():
    batch = stack_items([item(1), item(2)])
    assert batch["x"].shape == (2, 2) and batch["y"].tolist() == [1, 2]
    with pytest.raises(ValueError, match="disagree"):
        stack_items([item(1), {"x": np.zeros(2)}])


def test_fifo_pops_oldest_and_drops_when_full():
    r = FIFOReplay(3)
    for i in range(5):
        r.add(item(i))
    assert len(r) == 3 and r.dropped == 2
    assert r.sample(2)["y"].tolist() == [2, 3]
    assert len(r) == 1
    with pytest.raises(ValueError):
        r.sample(2)


def test_uniform_ring_overwrites_oldest_and_samples_uniformly():
    r = UniformReplay(4, seed=0)
    for i in range(6):
        r.add(item(i))
    assert len(r) == 4
    ys = r.sample(40_000)["y"]
    assert set(ys.tolist()) == {2, 3, 4, 5}
    np.testing.assert_allclose(np.bincount(ys, minlength=6)[2:] / 40_000, 0.25, atol=0.01)
    assert len(r) == 4  # sampling does not remove


def test_add_batch_equals_adding_one_by_one():
    one, many = UniformReplay(5, seed=0), UniformReplay(5, seed=0)
    items = [item(i) for i in range(7)]
    for it in items:
        one.add(it)
    many.add_batch(stack_items(items[:2]), 2)
    many.add_batch(stack_items(items[2:]), 5)
    for key in ("x", "y"):
        np.testing.assert_array_equal(one._data[key], many._data[key])
    assert one._start == many._start and len(one) == len(many) == 5
    big = UniformReplay(3, seed=0)
    big.add_batch(stack_items(items), 7)  # more than capacity: keeps the newest
    assert sorted(big._data["y"].tolist()) == [4, 5, 6]
    assert big.overwritten == 4


def test_one_storage_for_the_trainer_and_the_shards():
    """The trainer's buffers are the shards' ring (runtime/replay.py stores in ColumnarRing):
    one storage, whose batch inserts land where the items one by one would, in either mode."""
    assert issubclass(FIFOReplay, ColumnarRing) and issubclass(UniformReplay, ColumnarRing)
    items = [item(i) for i in range(11)]
    for mode in ("fifo", "uniform"):
        one, many = ColumnarRing(4, mode=mode), ColumnarRing(4, mode=mode)
        for it in items:
            one.add(it)
        many.add_batch(stack_items(items[:3]), 3)
        many.add_batch(stack_items(items[3:]), 8)  # twice the capacity in one batch
        for key in ("x", "y"):
            np.testing.assert_array_equal(one._data[key], many._data[key])
        assert (one._start, len(one), one.overwritten) == (many._start, len(many), 7)
    fifo = ColumnarRing(4, mode="fifo")
    fifo.add_batch(stack_items(items), 11)
    assert fifo.sample(3)["y"].tolist() == [7, 8, 9] and fifo.sample(3)["y"].tolist() == [10]


def test_without_a_layout_the_first_item_sets_it():
    """The trainer gives no layout: its first item's keys are held, values cast to its dtypes."""
    r = UniformReplay(4, seed=0)
    r.add({"x": np.zeros(2, np.float32), "y": 1})
    assert r._data["x"].shape == (4, 2) and r._data["y"].dtype == np.asarray(1).dtype
    r.add({"x": [1.0, 2.0], "y": np.int32(3)})  # cast as numpy assigns
    np.testing.assert_array_equal(r._data["x"][1], [1.0, 2.0])
    with pytest.raises(ValueError, match="differ"):
        r.add({"x": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="empty"):
        UniformReplay(2).sample(1)


def test_prioritized_replay_keeps_stale_items():
    """Its sum tree covers slots 0 to len - 1: an on-policy shard's version cut must not apply."""
    r = PrioritizedReplay(8, seed=0)
    r.add_batch({"param_version": np.arange(4)}, 4)
    assert r.discard_oldest_below("param_version", 3) == 0 and len(r) == 4
    ring = UniformReplay(8, seed=0)
    ring.add_batch({"param_version": np.arange(4)}, 4)
    assert ring.discard_oldest_below("param_version", 3) == 3 and len(ring) == 1


def test_prioritized_add_batch_gets_max_priority():
    r = PrioritizedReplay(8, alpha=1.0, seed=0)
    r.add(item(0))
    r.update_priorities(np.array([0]), np.array([5.0]))
    r.add_batch(stack_items([item(1), item(2)]), 2)
    assert r._sum[1] == pytest.approx(r._sum[0]) == pytest.approx(r._sum[2])


def test_prioritized_weights_do_not_collapse_when_one_item_is_unlikely():
    # One item with a near-zero priority is the buffer's worst case: normalizing by it made every
    # weight of every batch tiny. Normalized within the batch, the largest weight is 1.
    r = PrioritizedReplay(64, alpha=1.0, beta=1.0, eps=0.0, seed=0)
    r.add_batch(stack_items([item(i) for i in range(64)]), 64)
    r.update_priorities(np.arange(64), np.r_[1e-9, np.ones(63)])
    batch = r.sample(32)
    assert 0 not in batch["indices"]
    np.testing.assert_allclose(batch["weights"], 1.0, rtol=1e-6)


def test_rate_limiter_holds_samples_per_insert_within_tolerance():
    from surreal_kube.rl.replay import SampleToInsertRatio

    limiter = SampleToInsertRatio(samples_per_insert=8.0, min_size=10, tolerance=5, batch_size=32)
    inserted = 0
    while limiter.can_insert():  # before sampling starts: min_size plus the tolerance
        limiter.insert()
        inserted += 1
    assert inserted == 15
    assert not limiter.can_sample(10_000)
    # a fast producer and a slow consumer, alternating greedily: the ratio stays near 8
    for _ in range(2000):
        if limiter.can_sample(32):
            limiter.sample(32)
        elif limiter.can_insert():
            limiter.insert()
        else:
            raise AssertionError("deadlock: neither side may move")
    spi_after_start = limiter.sampled / (limiter.inserted - 10)
    assert 7.0 < spi_after_start < 9.0, spi_after_start
    off = SampleToInsertRatio(0, min_size=2, tolerance=1)
    assert not off.enabled and off.can_insert(10**9) and not off.can_sample(1)
    off.insert(2)
    assert off.can_sample(10**9)


def test_rate_limiter_forgets_items_that_left_unsampled():
    from surreal_kube.rl.replay import SampleToInsertRatio

    limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size=4, tolerance=8, batch_size=4)
    limiter.insert(12)
    assert not limiter.can_insert()
    limiter.forget(6)  # dropped as stale: they will never be sampled
    assert limiter.can_insert()


def test_rate_limiter_refuses_a_tolerance_with_no_room_for_a_batch():
    from surreal_kube.rl.replay import SampleToInsertRatio

    with pytest.raises(ValueError, match="no room for a batch of 512"):
        SampleToInsertRatio(samples_per_insert=128, min_size=100, tolerance=2, batch_size=512)


def _fill_and_drain(limiter, batch: int) -> tuple[int, int]:
    """(items a shard takes before inserts wait, items it holds when it first may serve)."""
    held = 0
    first_serve = None
    while limiter.can_insert():
        limiter.insert()
        held += 1
        if first_serve is None and held >= batch and limiter.can_sample(batch):
            first_serve = held
    return held, first_serve


def test_an_on_policy_shard_serves_at_one_batch_and_holds_one_message_more():
    """PPO's shard used to take a second batch behind the one it could serve (a band of one
    batch each way around startSampling): with agents that outran the learner, that batch waited
    an iteration and every item was learned from 2.3 iterations late."""
    from surreal_kube.experiment.resolve import resolve_experiment
    from surreal_kube.rl.replay import SampleToInsertRatio

    def shard(sets: list[str]) -> tuple[int, int]:
        spec = resolve_experiment("exp", sets=sets).spec
        spi, tolerance, center = spec.rate_limit()
        limiter = SampleToInsertRatio(
            spi, spec.replay.start_sampling, tolerance, spec.algorithm.batch_size, center=center
        )
        return _fill_and_drain(limiter, spec.algorithm.batch_size)

    assert shard(["algorithm.name=ppo"]) == (65, 64)  # batch 64, messages of 1
    assert shard(["algorithm.name=ppo", "agents.flushIteration=8"]) == (72, 64)
    # a start condition above the batch: served there, and still one message more at most
    assert shard(["algorithm.name=ppo", "replay.startSampling=200"]) == (201, 200)
    # a wider band when asked for: inserts run that far ahead
    assert shard(["algorithm.name=ppo", "replay.rateTolerance=64"]) == (128, 64)
    # off-policy keeps Reverb's band around startSampling: replay fills to draw from
    spec = resolve_experiment("exp", sets=["algorithm.name=ddpg"]).spec
    assert spec.rate_limit().center == spec.replay.start_sampling
