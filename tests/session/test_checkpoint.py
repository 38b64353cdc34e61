"""Checkpoints: naming, keep-history, keep-best, periodic min-interval, atomic writes, restore."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from surreal_kube.session.checkpoint import Checkpoint, CheckpointError, PeriodicCheckpoint


def state(v: float) -> dict:
    return {"w": torch.full((3,), v), "step": int(v), "nested": {"lr": 0.1, "names": ["a", "b"]}}


def files(folder) -> list[str]:
    return sorted(p.name for p in folder.glob("*.ckpt"))


def test_file_name_and_metadata(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner")
    path = ckpt.save(state(1), 1200, score=3.5, config={"algorithm": {"name": "ppo"}})
    assert path.name == "learner.1200.ckpt"
    loaded = ckpt.restore()
    assert torch.equal(loaded.state["w"], torch.full((3,), 1.0))
    assert loaded.state["nested"] == {"lr": 0.1, "names": ["a", "b"]}
    assert loaded.meta["global_steps"] == 1200
    assert loaded.meta["score"] == 3.5
    assert loaded.meta["config"] == {"algorithm": {"name": "ppo"}}


def test_keep_history(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=2)
    for steps in (100, 200, 300, 400):
        ckpt.save(state(steps), steps)
    assert files(tmp_path) == ["learner.300.ckpt", "learner.400.ckpt"]
    assert [e.global_steps for e in ckpt.history()] == [400, 300]


def test_keep_best_by_score(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=1, keep_best=2)
    for steps, score in ((100, 5.0), (200, 9.0), (300, 1.0), (400, 7.0), (500, 2.0)):
        ckpt.save(state(steps), steps, score=score)
    # newest (500) by history, best two by score: 200 (9.0) and 400 (7.0)
    assert files(tmp_path) == ["learner.200.ckpt", "learner.400.ckpt", "learner.500.ckpt"]
    assert ckpt.restore(0, "best").meta["global_steps"] == 200
    assert ckpt.restore(1, "best").meta["global_steps"] == 400
    assert ckpt.restore(0).meta["global_steps"] == 500


def test_restore_by_index_and_steps(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=3)
    for steps in (10, 20, 30):
        ckpt.save(state(steps), steps)
    assert ckpt.restore(0).meta["global_steps"] == 30
    assert ckpt.restore(2).meta["global_steps"] == 10
    assert torch.equal(ckpt.restore(steps=20).state["w"], torch.full((3,), 20.0))
    with pytest.raises(CheckpointError, match="no checkpoint at global_steps=25"):
        ckpt.restore(steps=25)
    with pytest.raises(CheckpointError, match="out of range"):
        ckpt.restore(3)
    with pytest.raises(CheckpointError, match="no best"):
        ckpt.restore(0, "best")


def test_a_new_instance_sees_existing_checkpoints(tmp_path):
    first = Checkpoint(tmp_path, "learner", keep_history=2, keep_best=1)
    first.save(state(1), 100, score=10.0)
    first.save(state(2), 200, score=1.0)
    again = Checkpoint(tmp_path, "learner", keep_history=2, keep_best=1)
    assert [e.global_steps for e in again.history()] == [200, 100]
    assert again.best()[0].global_steps == 100
    # ...even when the index is lost: it is rebuilt from the files' own metadata.
    again.index_path.unlink()
    rebuilt = Checkpoint(tmp_path, "learner", keep_history=2, keep_best=1)
    assert rebuilt.best()[0].score == 10.0
    assert rebuilt.restore_latest().meta["global_steps"] == 200


def test_restore_latest_on_fresh_folder(tmp_path):
    assert Checkpoint(tmp_path, "learner").restore_latest() is None


class Evil:
    """Unpickling this would run code: `__reduce__` calls a function of the attacker's choice."""

    def __reduce__(self):
        return (print, ("pwned",))


def test_arbitrary_objects_are_refused_at_save(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner")
    with pytest.raises(TypeError, match=r"checkpoint\['state'\]\['obj'\] is a Evil"):
        ckpt.save({"obj": Evil()}, 5)
    with pytest.raises(TypeError, match="numpy"):
        import numpy as np

        ckpt.save({"arr": np.zeros(2)}, 5)
    assert files(tmp_path) == []


def test_arbitrary_objects_are_never_unpickled(tmp_path, capsys):
    # A file planted under a checkpoint name (not written by Checkpoint.save).
    torch.save({"meta": {"global_steps": 7}, "state": {"obj": Evil()}}, tmp_path / "learner.7.ckpt")
    ckpt = Checkpoint(tmp_path, "learner")
    assert len(ckpt) == 0 and ckpt.set_aside == ["learner.7.ckpt"]  # refused, then set aside
    with pytest.raises(CheckpointError, match="cannot load"):
        ckpt._read(tmp_path / "learner.7.ckpt.corrupt")
    assert ckpt.restore_latest() is None
    assert "pwned" not in capsys.readouterr().out


def test_crash_mid_write_leaves_previous_checkpoint_loadable(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=2)
    ckpt.save(state(1.0), 100)
    # A separate process starts writing the next checkpoint and dies half-way (no cleanup runs).
    script = textwrap.dedent(
        f"""
        import os, torch
        from surreal_kube.session.checkpoint import Checkpoint
        def crash(obj, f, *a, **k):
            f.write(b"PK\\x03\\x04 half a zip file")
            f.flush()
            os._exit(9)
        torch.save = crash
        Checkpoint({str(tmp_path)!r}, "learner").save({{"w": torch.zeros(3)}}, 200)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == 9, proc.stderr.decode()
    assert list(tmp_path.glob(".learner.*.tmp")), "the crashed write left its temp file"
    assert files(tmp_path) == ["learner.100.ckpt"]  # no half-written .ckpt under the real name
    again = Checkpoint(tmp_path, "learner", keep_history=2)
    assert not list(tmp_path.glob(".learner.*.tmp"))  # stale temp files are cleaned up
    loaded = again.restore()
    assert loaded.meta["global_steps"] == 100
    assert torch.equal(loaded.state["w"], torch.full((3,), 1.0))


def test_failed_write_in_process_keeps_previous(tmp_path, monkeypatch):
    ckpt = Checkpoint(tmp_path, "learner")
    ckpt.save(state(1.0), 100)

    def fail(obj, f, *a, **k):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(state(2.0), 200)
    monkeypatch.undo()
    assert files(tmp_path) == ["learner.100.ckpt"]
    assert not list(tmp_path.glob(".*.tmp"))
    assert ckpt.restore().meta["global_steps"] == 100
    index = json.loads(ckpt.index_path.read_text())
    assert [e["global_steps"] for e in index["checkpoints"]] == [100]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_periodic_with_min_interval(tmp_path):
    clock = FakeClock()
    ckpt = PeriodicCheckpoint(
        tmp_path, "learner", period=3, min_interval=10.0, keep_history=10, clock=clock
    )
    saved = []
    for it in range(1, 13):
        clock.now = it * 2.0  # one call every 2 s
        if ckpt.save(lambda it=it: state(it), it) is not None:
            saved.append(it)
    # Due at call 3 (t=6): saved. Due again at call 6 (t=12) but only 6 s later: retried on each
    # call until t >= 16 (call 8). Due again at call 11 (t=22), too early until t >= 26.
    assert saved == [3, 8]
    clock.now = 26.0
    assert ckpt.save(state(13), 13) is not None  # the pending save goes through
    assert ckpt.save(state(14), 14) is None  # one call since the last save: not due
    clock.now = 100.0
    assert ckpt.save(state(100), 100, force=True) is not None


def test_periodic_state_callable_only_evaluated_when_saving(tmp_path):
    calls = []
    ckpt = PeriodicCheckpoint(tmp_path, "learner", period=2)
    for it in range(4):
        ckpt.save(lambda: calls.append(1) or state(1.0), it)
    assert len(calls) == 2


def test_a_corrupt_newest_checkpoint_is_set_aside_and_the_older_one_restored(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=3)
    for steps in (10, 20, 30):
        ckpt.save(state(steps), steps)
    newest = tmp_path / "learner.30.ckpt"
    newest.write_bytes(newest.read_bytes()[:200])  # truncated, as a dying disk leaves it
    again = Checkpoint(tmp_path, "learner", keep_history=3)
    loaded = again.restore_latest()
    assert loaded is not None and loaded.meta["global_steps"] == 20
    assert torch.equal(loaded.state["w"], torch.full((3,), 20.0))
    assert again.set_aside == ["learner.30.ckpt"]
    assert files(tmp_path) == ["learner.10.ckpt", "learner.20.ckpt"]
    assert (tmp_path / "learner.30.ckpt.corrupt").is_file()  # kept for a post-mortem
    assert [e.global_steps for e in again.history()] == [20, 10]
    index = json.loads(again.index_path.read_text())
    assert [e["global_steps"] for e in index["checkpoints"]] == [10, 20]
    # the next instance (the next restart) goes straight to the good one
    third = Checkpoint(tmp_path, "learner", keep_history=3)
    assert third.restore_latest().meta["global_steps"] == 20 and third.set_aside == []


def test_a_checkpoint_not_in_the_index_that_does_not_load_is_set_aside(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=3)
    ckpt.save(state(1), 10)
    (tmp_path / "learner.99.ckpt").write_bytes(b"not a checkpoint")
    again = Checkpoint(tmp_path, "learner", keep_history=3)
    assert again.set_aside == ["learner.99.ckpt"]
    assert again.restore_latest().meta["global_steps"] == 10


def test_when_every_checkpoint_is_corrupt_the_learner_starts_afresh(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=3)
    for steps in (10, 20):
        ckpt.save(state(steps), steps)
    for name in ("learner.10.ckpt", "learner.20.ckpt"):
        (tmp_path / name).write_bytes(b"PK\x03\x04 junk")
    assert ckpt.restore_latest() is None
    assert sorted(ckpt.set_aside) == ["learner.10.ckpt", "learner.20.ckpt"]
    assert files(tmp_path) == [] and len(ckpt) == 0


def test_a_full_disk_skips_a_periodic_save_and_it_is_retried_once_space_is_back(tmp_path, caplog):
    from tests.session.tmpfs import fill, free, small_tmpfs

    clock = FakeClock()
    with small_tmpfs(tmp_path / "fs", "4m") as fs:
        ckpt = PeriodicCheckpoint(fs, "learner", period=1, clock=clock, retry_interval=5.0)
        assert ckpt.save(state(1), 1) is not None
        fill(fs)
        clock.now = 1.0
        with caplog.at_level("WARNING", "surreal_kube.session.checkpoint"):
            assert ckpt.save(state(2), 2) is None  # no space: skipped, not raised
            clock.now = 2.0
            assert ckpt.save(state(3), 3) is None  # within the retry interval: not even tried
        assert ckpt.skipped == 1 and "No space left" in (ckpt.last_error or "")
        said = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
        assert len(said) == 1 and "skipped, trying again every 5 s" in said[0]
        assert files(fs) == ["learner.1.ckpt"] and not list(fs.glob(".*.tmp"))
        assert ckpt.restore_latest().meta["global_steps"] == 1
        clock.now = 6.5
        assert ckpt.save(state(4), 4) is None  # tried again: still full
        assert ckpt.skipped == 2
        free(fs)
        clock.now = 12.0
        assert ckpt.save(state(5), 5) is not None  # space is back: written
        assert ckpt.last_error is None
        assert Checkpoint(fs, "learner").restore_latest().meta["global_steps"] == 5


def test_a_checkpoint_that_cannot_be_read_now_is_skipped_but_never_set_aside(tmp_path):
    ckpt = Checkpoint(tmp_path, "learner", keep_history=3)
    for steps in (10, 20):
        ckpt.save(state(steps), steps)
    newest = tmp_path / "learner.20.ckpt"
    newest.unlink()
    newest.mkdir()  # reading it is an OSError (IsADirectoryError), as EIO would be
    again = Checkpoint(tmp_path, "learner", keep_history=3)
    assert again.restore_latest().meta["global_steps"] == 10  # the older one, meanwhile
    assert again.set_aside == [] and newest.is_dir()  # left in place: it may read later
    (tmp_path / "learner.10.ckpt").unlink()
    alone = Checkpoint(tmp_path, "learner", keep_history=3)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        alone.restore_latest()  # a restart tries again, rather than a fresh start over it
