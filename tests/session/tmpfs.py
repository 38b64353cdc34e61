"""A real small tmpfs for storage fault tests: mounted for one test, filled on demand, unmounted.

Mounting needs CAP_SYS_ADMIN (root, as on the CI machine); without it the test is skipped with
the reason, never run against a disk that cannot fill.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = ".filler"


@contextmanager
def small_tmpfs(where: Path, size: str = "32m") -> Iterator[Path]:
    """`where` as a tmpfs of `size` for the duration of the block (unmounted after, always)."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(fs: Path) -> Path:
    """Write a file until the file system has no block left (ENOSPC); returns that file."""
    path = fs / FILLER
    chunk = b"\0" * (1 << 16)
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    # a page may remain: take it with small writes
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return path


def free(fs: Path) -> None:
    """Give the space back (remove the filler)."""
    (fs / FILLER).unlink(missing_ok=True)
