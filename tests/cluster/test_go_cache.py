"""The cluster builds keep their disk bounded (tests/cluster/go-cache.sh).

CI's warm machine ran out of disk after go-env.sh's flags changed: the builds had filled the
user's Go cache twice over (about 18 GB each time) and kept the superseded binaries beside the new
ones, and its real node reported DiskPressure. These run build-addons.sh for real with a stand-in
`go` that records the cache it was given and writes the binary, so nothing is compiled.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FAKE_GO = """#!/usr/bin/env bash
echo "$GOCACHE" >> "$RECORD"
case "$1" in
  env) echo go1.0.0 ;;
  list) pwd ;;
  build)
    while [[ $# -gt 0 ]]; do
      if [[ "$1" == -o ]]; then printf '#!/bin/sh\\n' > "$2"; chmod +x "$2"; fi
      shift
    done ;;
esac
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[dict[str, str]]:
    go = tmp_path / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    env = {
        **os.environ,
        "GO": str(go),
        "RECORD": str(tmp_path / "record"),
        "SURREAL_KUBE_ADDONS_CACHE": str(tmp_path / "addons"),
        "SURREAL_KUBE_GOCACHE": str(tmp_path / "go-build"),
    }
    env.pop("GOCACHE", None)
    yield env


def _build(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(HERE / "build-addons.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _old_build(root: Path, name: str) -> Path:
    old = root / name
    (old / "bin").mkdir(parents=True)
    (old / "bin" / ".complete").touch()
    (old / ".lock").touch()
    return old


@contextlib.contextmanager
def _held(lock: Path, shared: bool = False) -> Iterator[None]:
    """This process holds `lock` as a running build would, for the duration: a lock of its
    own open file, so the scripts see it held, released the moment the block ends (a holder
    process killed at the end released it only once its children had gone: CI's tier ran
    `drop` before that and found the cache still in use)."""
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def test_builds_use_their_own_go_cache_and_replace_superseded_outputs(
    sandbox: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "addons"
    superseded = _old_build(root, "registry-v0.0.1_0123456789")
    building = _old_build(root, "registry-v0.0.2_abcdefabcd")
    other = _old_build(root, "kueue-v0.1.0_0123456789")
    with _held(building / ".lock"):
        done = _build(sandbox, "registry")
    assert done.returncode == 0, done.stderr
    new = Path(done.stdout.splitlines()[-1])
    assert (new / "registry").is_file() and (new / ".complete").is_file()
    assert set((tmp_path / "record").read_text().split()) == {sandbox["SURREAL_KUBE_GOCACHE"]}
    assert not superseded.exists(), "a superseded build was kept"
    assert building.exists(), "a build whose lock was held was removed"
    assert other.exists(), "another add-on's build was removed"
    assert "removed the superseded build registry-v0.0.1_0123456789" in done.stderr

    # reuse prunes too: a machine that has the new build already sheds the old ones
    again = _old_build(root, "registry-v0.0.1_fedcba9876")
    done = _build(sandbox, "registry")
    assert done.returncode == 0, done.stderr
    assert not again.exists() and not building.exists() and other.exists()


def test_drop_deletes_the_cache_unless_a_build_holds_it(sandbox: dict[str, str]) -> None:
    cache = Path(sandbox["SURREAL_KUBE_GOCACHE"])
    (cache / "ab").mkdir(parents=True)
    (cache / "ab" / "entry-d").write_bytes(b"x" * 4096)
    drop = ["bash", str(HERE / "go-cache.sh"), "drop"]
    lock = Path(f"{cache}.lock")
    lock.touch()
    with _held(lock, shared=True):
        kept = subprocess.run(drop, env=sandbox, capture_output=True, text=True, timeout=30)
    assert kept.returncode == 0 and cache.is_dir(), kept.stderr
    assert "a build is using" in kept.stderr
    dropped = subprocess.run(drop, env=sandbox, capture_output=True, text=True, timeout=30)
    assert dropped.returncode == 0 and not cache.exists(), dropped.stderr
    assert "dropped the builds' Go cache" in dropped.stderr
    again = subprocess.run(drop, env=sandbox, capture_output=True, text=True, timeout=30)
    assert again.returncode == 0, again.stderr
