"""The experiment folder: where a local experiment keeps everything it writes.

One folder per experiment under a root (`~/.surreal-kube/experiments` by default), so that `list`,
`status`, `logs`, `tb`, `delete` and `--resume` find an experiment by name alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("~/.surreal-kube/experiments")
ROOT_ENV = "SURREAL_KUBE_ROOT"
PRIVATE_UMASK = 0o077
"""What a local run creates is its owner's alone: folders 0700, files 0600. Its logs, events,
checkpoints and state say what it learns and how to reach it; no other user of the machine
needs them."""


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Create files and folders closed to other users within the block (and in every process
    started within it, which inherits the umask)."""
    before = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(before)


def default_root() -> Path:
    """The experiments root: $SURREAL_KUBE_ROOT or ~/.surreal-kube/experiments."""
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT).expanduser()


@dataclass(frozen=True)
class ExperimentFolder:
    """Paths of one experiment's folder (nothing is created until `create()`)."""

    path: Path

    @classmethod
    def of(cls, name: str, root: Path | None = None) -> ExperimentFolder:
        """The folder of experiment `name` under `root` (default root when None)."""
        return cls((root or default_root()).expanduser().resolve() / name)

    @property
    def name(self) -> str:
        """The experiment name (the folder's name)."""
        return self.path.name

    config = property(lambda self: self.path / "config.yml")
    state = property(lambda self: self.path / "state.json")
    logs = property(lambda self: self.path / "logs")
    tensorboard = property(lambda self: self.path / "tensorboard")
    checkpoints = property(lambda self: self.path / "checkpoints")
    videos = property(lambda self: self.path / "videos")
    status = property(lambda self: self.path / "status")
    results = property(lambda self: self.path / "results")

    def create(self) -> None:
        """Make the folder (0700, also when it existed) and its sub-folders."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path.chmod(0o700)
        for p in (
            self.logs,
            self.tensorboard,
            self.checkpoints,
            self.videos,
            self.status,
            self.results,
        ):
            p.mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        """True once the experiment was created here (its config is written)."""
        return self.config.is_file()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any | None:
    """The JSON in `path`, or None when it is missing or being replaced."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
