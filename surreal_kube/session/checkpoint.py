"""Checkpoints: `<name>.<global_steps>.ckpt` files, written atomically, with history and best-N.

A checkpoint holds tensors and plain data only (`torch.save` of state dicts plus a metadata dict)
and is loaded with `weights_only=True`, so opening one can never execute code. Each file is written
to a temporary name in the same folder, fsynced and renamed over its final name: a crash mid-write
leaves the previous checkpoints intact and at worst a stray temporary file, which the next run
removes. Which files exist is also recorded in an index (`<name>.index.json`, written the same
way); if the index is lost or stale, it is rebuilt from the files themselves.

Faults a run must survive: a checkpoint that does not load (truncated by a dying disk, overwritten,
not ours) is set aside as `<file>.corrupt` (kept for a post-mortem, logged, counted in
`set_aside`) and restore falls back to the next older one, so one bad file never makes a learner
restart-loop while a good one is kept. A periodic save that hits a full disk (or any OSError) is
skipped, logged once per fault and counted in `skipped`, and tried again `retry_interval` seconds
later: the run goes on learning and checkpoints again once space is back.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from surreal_kube.errors import SurrealKubeError

log = logging.getLogger(__name__)

FORMAT = 1
CORRUPT_SUFFIX = ".corrupt"
"""Appended to the name of a checkpoint that does not load (no longer matched as a checkpoint)."""
RETRY_INTERVAL = 10.0
"""Seconds before a periodic save that failed (a full disk) is tried again."""


class CheckpointError(SurrealKubeError):
    """No checkpoint matches a restore request, or a checkpoint file is unreadable.

    `corrupt` is True when the file itself is bad (it was read but is not a checkpoint), False
    for an I/O error or a missing file, which may pass and is no reason to set the file aside.
    """

    def __init__(self, message: str, *, corrupt: bool = False) -> None:
        super().__init__(message)
        self.corrupt = corrupt


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint on disk."""

    global_steps: int
    score: float | None
    time: float
    file: str


@dataclass
class Loaded:
    """A restored checkpoint: the saved state and its metadata."""

    state: dict[str, Any]
    meta: dict[str, Any]
    path: Path


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """Write a file via `write(fileobj)` to a temp name, fsync, then rename over `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


_PLAIN = (str, int, float, bool, type(None), torch.Tensor, torch.Size, torch.dtype)


def check_plain(value: Any, where: str = "state") -> None:
    """Raise TypeError unless `value` is tensors and plain data (what weights_only loads)."""
    if isinstance(value, _PLAIN):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int):
                raise TypeError(f"{where}: key {key!r} is not a str or int")
            check_plain(item, f"{where}[{key!r}]")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}: checkpoints hold tensors and plain data only "
        "(convert numpy arrays with torch.from_numpy, objects to state dicts)"
    )


class Checkpoint:
    """Saves and restores `<folder>/<name>.<global_steps>.ckpt` files.

    Keeps the newest `keep_history` checkpoints and the best `keep_best` by score (higher is
    better); a file is deleted once it is in neither set. The newest checkpoint is always kept, so
    there is something to restart from even with both limits at zero.
    """

    def __init__(
        self, folder: str | Path, name: str = "learner", keep_history: int = 2, keep_best: int = 0
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ValueError(f"checkpoint name must be letters, digits, '-' or '_', got {name!r}")
        if keep_history < 0 or keep_best < 0:
            raise ValueError("keep_history and keep_best must be >= 0")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.keep_history = keep_history
        self.keep_best = keep_best
        self._pattern = re.compile(rf"{re.escape(name)}\.(\d+)\.ckpt")
        self._entries: dict[int, CheckpointInfo] = {}
        self.set_aside: list[str] = []
        """Files found not to load, renamed `<file>.corrupt` (by this instance)."""
        self._remove_stale_temps()
        self._load_index()

    # -- paths and index -------------------------------------------------------------------------

    def path_for(self, global_steps: int) -> Path:
        """Where the checkpoint of `global_steps` lives."""
        return self.folder / f"{self.name}.{global_steps}.ckpt"

    @property
    def index_path(self) -> Path:
        """The JSON index of this checkpoint series."""
        return self.folder / f"{self.name}.index.json"

    def _remove_stale_temps(self) -> None:
        for tmp in self.folder.glob(f".{self.name}.*.tmp"):
            tmp.unlink(missing_ok=True)

    def _load_index(self) -> None:
        entries: dict[int, CheckpointInfo] = {}
        try:
            raw = json.loads(self.index_path.read_text())
            for e in raw.get("checkpoints", []):
                info = CheckpointInfo(
                    int(e["global_steps"]), e["score"], float(e["time"]), e["file"]
                )
                entries[info.global_steps] = info
        except (OSError, ValueError, KeyError, TypeError):
            entries = {}
        on_disk = {}
        for path in self.folder.iterdir():
            match = self._pattern.fullmatch(path.name)
            if match:
                on_disk[int(match.group(1))] = path
        entries = {s: e for s, e in entries.items() if s in on_disk}
        for steps, path in on_disk.items():
            if steps not in entries:
                try:
                    meta = self._read(path).meta
                except CheckpointError as exc:
                    if exc.corrupt:
                        self._set_aside(path, exc)
                    continue
                entries[steps] = CheckpointInfo(
                    steps, meta.get("score"), meta.get("time", 0.0), path.name
                )
        self._entries = entries

    def _write_index(self) -> None:
        data = {
            "checkpoints": [
                asdict(e) for e in sorted(self._entries.values(), key=lambda e: e.global_steps)
            ]
        }
        payload = json.dumps(data, indent=1).encode()
        try:
            atomic_write(self.index_path, lambda f: f.write(payload))
        except OSError as exc:  # the files are the truth: a stale index is rebuilt from them
            log.warning("cannot write the checkpoint index %s: %s", self.index_path, exc)

    def _set_aside(self, path: Path, exc: CheckpointError) -> None:
        """Rename a checkpoint that does not load out of the series (see the module docstring)."""
        target = path.with_name(path.name + CORRUPT_SUFFIX)
        try:
            os.replace(path, target)
            where = f"set aside as {target.name}"
        except OSError as err:
            where = f"left in place, cannot rename it: {err}"
        self.set_aside.append(path.name)
        log.warning("checkpoint %s does not load (%s); %s", path.name, exc, where)

    # -- listing ---------------------------------------------------------------------------------

    def history(self) -> list[CheckpointInfo]:
        """Checkpoints on record, newest (most global steps) first."""
        return sorted(self._entries.values(), key=lambda e: e.global_steps, reverse=True)

    def best(self) -> list[CheckpointInfo]:
        """Scored checkpoints, best first (ties: the newer first)."""
        scored = [e for e in self._entries.values() if e.score is not None]
        return sorted(scored, key=lambda e: (e.score, e.global_steps), reverse=True)

    def __len__(self) -> int:
        return len(self._entries)

    # -- save / restore --------------------------------------------------------------------------

    def save(
        self,
        state: Mapping[str, Any],
        global_steps: int,
        score: float | None = None,
        config: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write `<name>.<global_steps>.ckpt` atomically, then prune; returns its path.

        `state` must hold tensors and plain data (dicts, lists, numbers, strings): anything else
        would not load under `weights_only=True` and is refused now rather than at restore time.
        """
        if global_steps < 0:
            raise ValueError(f"global_steps must be >= 0, got {global_steps}")
        now = time.time()
        meta = {
            "format": FORMAT,
            "name": self.name,
            "global_steps": int(global_steps),
            "score": None if score is None else float(score),
            "time": now,
            "config": dict(config or {}),
            "extra": dict(extra or {}),
        }
        payload = {"meta": meta, "state": dict(state)}
        check_plain(payload, "checkpoint")
        path = self.path_for(global_steps)
        atomic_write(path, lambda f: torch.save(payload, f))
        self._entries[int(global_steps)] = CheckpointInfo(
            int(global_steps), None if score is None else float(score), now, path.name
        )
        self._prune(int(global_steps))
        self._write_index()
        return path

    def _prune(self, newest: int) -> None:
        keep = {newest}
        keep.update(e.global_steps for e in self.history()[: self.keep_history])
        keep.update(e.global_steps for e in self.best()[: self.keep_best])
        for steps in list(self._entries):
            if steps not in keep:
                self.path_for(steps).unlink(missing_ok=True)
                del self._entries[steps]

    def _read(self, path: Path, map_location: str | torch.device = "cpu") -> Loaded:
        try:
            payload = torch.load(path, map_location=map_location, weights_only=True)
        except (OSError, MemoryError) as exc:  # the disk or this machine, maybe not the file
            raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
        except Exception as exc:
            raise CheckpointError(f"cannot load checkpoint {path}: {exc}", corrupt=True) from exc
        if not isinstance(payload, dict) or "meta" not in payload or "state" not in payload:
            raise CheckpointError(f"{path} is not a surreal-kube checkpoint", corrupt=True)
        return Loaded(payload["state"], payload["meta"], path)

    def restore(
        self,
        target: int = 0,
        mode: Literal["history", "best"] = "history",
        *,
        steps: int | None = None,
        map_location: str | torch.device = "cpu",
    ) -> Loaded:
        """Load a checkpoint.

        Args:
            target: index into `history()` (0 = latest) or `best()` (0 = best), per `mode`.
            steps: load the checkpoint of exactly these global steps instead.
            map_location: where tensors land (e.g. "cpu" to inspect a GPU run's checkpoint).
        """
        if steps is not None:
            if steps not in self._entries:
                have = sorted(self._entries)
                raise CheckpointError(f"no checkpoint at global_steps={steps}; have {have}")
            return self._read(self.path_for(steps), map_location)
        listing = self.history() if mode == "history" else self.best()
        if not listing:
            raise CheckpointError(f"no {mode} checkpoint named {self.name!r} in {self.folder}")
        if not 0 <= target < len(listing):
            raise CheckpointError(f"{mode} index {target} out of range: {len(listing)} checkpoints")
        return self._read(self.folder / listing[target].file, map_location)

    def restore_latest(self, map_location: str | torch.device = "cpu") -> Loaded | None:
        """The newest checkpoint that loads, or None when none does (a fresh start).

        A corrupt file is set aside and the next older one tried; one that cannot be read now
        (an I/O error) is skipped but left in place, and when no other loads either, that
        error is raised (a restart tries again) rather than a fresh start. A learner restarted
        after its newest checkpoint went bad thus resumes from the previous one instead of
        failing on every restart until its restarts run out.
        """
        unreadable: CheckpointError | None = None
        for info in self.history():
            path = self.folder / info.file
            try:
                return self._read(path, map_location)
            except CheckpointError as exc:
                if exc.corrupt:
                    self._set_aside(path, exc)
                    del self._entries[info.global_steps]
                    self._write_index()
                else:
                    log.warning("checkpoint %s skipped: %s", info.file, exc)
                    unreadable = unreadable or exc
        if unreadable is not None:  # starting afresh would bury checkpoints that may load later
            raise unreadable
        if self.set_aside:
            log.error("no checkpoint of %r in %s loads: starting afresh", self.name, self.folder)
        return None


class PeriodicCheckpoint(Checkpoint):
    """A Checkpoint that saves only every `period` calls and at least `min_interval` s apart.

    `save` is called every learner iteration; it writes when `period` calls have passed since the
    last write *and* `min_interval` seconds have elapsed (a due save that is too early is retried
    on the next calls rather than skipped for a whole period). A save that fails with an OSError
    (a full disk) is skipped and counted in `skipped`, said once in the log until a save succeeds
    again, and not tried again for `retry_interval` seconds. `clock` is monotonic: a step of the
    wall clock neither delays checkpoints nor crowds them.
    """

    def __init__(
        self,
        folder: str | Path,
        name: str = "learner",
        period: int = 1,
        min_interval: float = 0.0,
        keep_history: int = 2,
        keep_best: int = 0,
        clock: Callable[[], float] = time.monotonic,
        retry_interval: float = RETRY_INTERVAL,
    ) -> None:
        super().__init__(folder, name, keep_history, keep_best)
        if period < 1:
            raise ValueError(f"period must be >= 1, got {period}")
        if retry_interval < 0:
            raise ValueError(f"retry_interval must be >= 0, got {retry_interval}")
        self.period = period
        self.min_interval = float(min_interval)
        self.retry_interval = float(retry_interval)
        self.clock = clock
        self._calls = 0
        self._last_save: float | None = None
        self._retry_at: float | None = None
        self.skipped = 0
        """Saves that failed (OSError) and were skipped, over this instance's life."""
        self.last_error: str | None = None
        """Why the newest failed save failed; None once a save succeeded after it."""

    def save(  # type: ignore[override]
        self,
        state: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
        global_steps: int,
        score: float | None = None,
        config: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        force: bool = False,
    ) -> Path | None:
        """Save if due (or `force`); returns the path written, or None (not due, or skipped).

        `state` may be a callable, so the (possibly expensive) state dict is only built when a
        save actually happens.
        """
        self._calls += 1
        now = self.clock()
        due = self._calls >= self.period
        early = self._last_save is not None and now - self._last_save < self.min_interval
        waiting = self._retry_at is not None and now < self._retry_at
        if not force and (not due or early or waiting):
            return None
        resolved = state() if callable(state) else state
        try:
            path = super().save(resolved, global_steps, score, config, extra)
        except OSError as exc:
            self.skipped += 1
            self._retry_at = now + self.retry_interval
            if self.last_error is None:
                log.warning(
                    "checkpoint at %d not written (%s): skipped, trying again every %.0f s",
                    global_steps,
                    exc,
                    self.retry_interval,
                )
            self.last_error = str(exc)
            return None
        if self.last_error is not None:
            log.info("checkpoints written again (%s) after %d skipped", path.name, self.skipped)
        self.last_error = None
        self._retry_at = None
        self._calls = 0
        self._last_save = now
        return path
