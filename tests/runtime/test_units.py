"""Pure pieces of the runtime: context from the environment, progress files, the replay ring."""

from __future__ import annotations

import json

import numpy as np
import pytest

from surreal_kube.errors import RuntimeRoleError
from surreal_kube.rl.replay import ColumnarRing, ItemBufferAdapter
from surreal_kube.runtime.context import RoleContext, index_from_hostname
from surreal_kube.runtime.layout import ItemLayout, LayoutError
from surreal_kube.runtime.status import ProgressFile, read_status
from surreal_kube.runtime.tensorplex import InvalidScalars, bin_name, parse_scalars


def _env(**extra: str) -> dict[str, str]:
    base = {
        "SURREAL_EXPERIMENT": "exp",
        "SURREAL_ROLE": "agents",
        "SURREAL_CONFIG": "/nonexistent.yml",
        "SURREAL_EXPERIMENT_DIR": "/tmp/x",
        "SURREAL_PS_SERVE_ADDR": "tcp://ps:7020",
    }
    base.update(extra)
    return base


def test_index_comes_from_env_then_pod_hostname():
    assert RoleContext.from_env(_env(SURREAL_INDEX="3")).index == 3
    ctx = RoleContext.from_env(_env(HOSTNAME="exp-agents-12"))
    assert ctx.index == 12 and ctx.process == "agents-12"
    assert RoleContext.from_env(_env(HOSTNAME="laptop")).index == 0
    assert RoleContext.from_env(_env(SURREAL_INDEX="3"), index=5).index == 5  # --id wins
    # A learner pod's hostname suffix is not an index.
    learner = RoleContext.from_env(_env(SURREAL_ROLE="learner", HOSTNAME="exp-learner-7"))
    assert learner.index == 0 and learner.process == "learner"
    assert index_from_hostname("exp-evals-0") == 0 and index_from_hostname("x") is None


def test_missing_or_contradictory_environment_is_a_clear_error():
    env = _env()
    del env["SURREAL_CONFIG"]
    with pytest.raises(RuntimeRoleError, match="SURREAL_CONFIG is not set"):
        RoleContext.from_env(env)
    with pytest.raises(RuntimeRoleError, match="SURREAL_ROLE is 'agents'"):
        RoleContext.from_env(_env(), role="learner")
    with pytest.raises(RuntimeRoleError, match="SURREAL_INDEX must be an integer"):
        RoleContext.from_env(_env(SURREAL_INDEX="x"))
    ctx = RoleContext.from_env(_env())
    assert ctx.addr("ps-serve") == "tcp://ps:7020"
    with pytest.raises(RuntimeRoleError, match="SURREAL_REPLAY_COLLECTOR_0_ADDR"):
        ctx.addr("replay-collector-0")
    assert ctx.optional_addr("tensorplex") is None


def test_progress_file_is_atomic_json_and_counters_survive_restarts(tmp_path):
    first = ProgressFile(tmp_path, "exp", "agents-0", "agents", period=0.0)
    first.update(env_steps=100, env_steps_per_agent={0: 60, 1: 40}, episodes=3, param_version=7)
    first.write("running")
    data = read_status(tmp_path / "status" / "agents-0.json")
    assert data is not None
    assert data["env_steps"] == 100 and data["env_steps_per_agent"] == {"0": 60, "1": 40}
    assert data["state"] == "running" and data["restarts"] == 0 and data["schema"] == 1
    assert not list((tmp_path / "status").glob(".*tmp"))  # no temporary left behind

    again = ProgressFile(tmp_path, "exp", "agents-0", "agents", period=0.0)
    again.update(env_steps=5, env_steps_per_agent={0: 5, 1: 0}, episodes=1)
    again.write()
    data = json.loads((tmp_path / "status" / "agents-0.json").read_text())
    assert data["restarts"] == 1
    assert data["env_steps"] == 105 and data["env_steps_per_agent"] == {"0": 65, "1": 40}
    assert data["episodes"] == 4


def _layout(**fields: tuple[type, tuple[int, ...]]) -> ItemLayout:
    return ItemLayout({k: (np.dtype(t), shape) for k, (t, shape) in fields.items()})


def test_ring_fifo_returns_oldest_first_and_removes_them():
    ring = ColumnarRing(10, _layout(x=(np.int64, ()), y=(np.float32, (1,))), "fifo")
    ring.add_batch({"x": np.arange(6), "y": np.arange(6, dtype=np.float32)[:, None]}, 6)
    ring.add_batch({"x": np.arange(6, 13), "y": np.arange(6, 13, dtype=np.float32)[:, None]}, 7)
    assert len(ring) == 10 and ring.overwritten == 3  # 0, 1, 2 fell off
    batch = ring.sample(4)
    np.testing.assert_array_equal(batch["x"], [3, 4, 5, 6])
    assert batch["y"].shape == (4, 1)
    np.testing.assert_array_equal(ring.sample(6)["x"], [7, 8, 9, 10, 11, 12])  # wraps around
    assert len(ring) == 0


def test_ring_uniform_keeps_items_and_refuses_other_layouts():
    ring = ColumnarRing(1000, _layout(x=(np.int64, ())), "uniform", seed=1)
    ring.add_batch({"x": np.arange(100)}, 100)
    batch = ring.sample(512)
    assert len(ring) == 100 and batch["x"].shape == (512,)
    assert set(batch["x"].tolist()) <= set(range(100)) and len(set(batch["x"].tolist())) > 50
    with pytest.raises(LayoutError):
        ring.add_batch({"x": np.arange(3, dtype=np.float32)}, 3)
    with pytest.raises(LayoutError):
        ring.add_batch({"z": np.arange(3)}, 3)
    big = ColumnarRing(5, _layout(x=(np.int64, ())), "fifo")
    big.add_batch({"x": np.arange(12)}, 12)  # larger than the ring: newest survive
    np.testing.assert_array_equal(big.sample(5)["x"], [7, 8, 9, 10, 11])


def test_item_adapter_feeds_item_buffers():
    from surreal_kube.rl.replay import PrioritizedReplay

    store = ItemBufferAdapter(PrioritizedReplay(64, seed=0), _layout(obs=(np.float32, (3,))))
    store.add_batch({"obs": np.ones((10, 3), np.float32)}, 10)
    assert len(store) == 10
    batch = store.sample(4)
    assert batch["obs"].shape == (4, 3) and "weights" in batch and "indices" in batch


def test_scalars_validation_and_bins():
    good = {"src": "agents-0", "grp": "agents", "idx": 9, "step": 5, "t": 1.0, "vals": {"a/b": 1}}
    assert parse_scalars(good)[:4] == ("agents-0", "agents", 9, 5)
    for bad in (
        {"src": "../etc"},
        {"src": "Learner"},
        {"grp": "hackers"},
        {"idx": -1},
        {"vals": {"../x": 1.0}},
        {"vals": {"a": float("nan")}},
        {"vals": {}},
        {"step": True},
    ):
        with pytest.raises(InvalidScalars):
            parse_scalars({**good, **bad})
    assert bin_name("agents", 11, 8) == "agents/8-15"
    assert bin_name("agents", 1, 8, count=2) == "agents/0-1"
