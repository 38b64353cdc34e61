"""A local experiment's files are closed to other users of the machine: folder 0700, files 0600.

Before, the folder and its logs, TensorBoard events and config were 0755/0644 (the caller's
umask): any local user could read what the run learns and the ports it listens on. The whole
run's files are checked in test_storage_faults.py (a real run); here what `create` writes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.local import backend


def open_to_others(root: Path) -> list[str]:
    """Every path under `root` (itself included) that a group or other user may use."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {mode:o}")
    return found


def test_create_writes_a_folder_closed_to_other_users(tmp_path: Path) -> None:
    before = os.umask(0o022)  # a usual login umask
    try:
        exp = resolve_experiment("perm", sets=["env.id=gym:CartPole-v1"])
        _, folder, wiring, _ = backend.prepare(exp, root=tmp_path)
        wiring.remove()  # no run follows: its socket folder may be outside tmp_path
        assert os.umask(0o022) == 0o022  # prepare leaves the caller's umask as it was
    finally:
        os.umask(before)
    assert stat.S_IMODE(folder.path.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.config.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.state.stat().st_mode) == 0o600
    assert open_to_others(folder.path) == []


def test_an_existing_open_folder_is_closed_again(tmp_path: Path) -> None:
    exp = resolve_experiment("perm", sets=["env.id=gym:CartPole-v1"])
    (tmp_path / "perm").mkdir(mode=0o755)
    (tmp_path / "perm").chmod(0o755)
    _, folder, wiring, _ = backend.prepare(exp, root=tmp_path)
    wiring.remove()
    assert stat.S_IMODE(folder.path.stat().st_mode) == 0o700


def test_processes_started_within_private_files_create_private_files(tmp_path: Path) -> None:
    import subprocess

    from surreal_kube.launch.local.folder import private_files

    with private_files():
        subprocess.run(["sh", "-c", f"echo x > {tmp_path / 'child.log'}"], check=True)
    assert stat.S_IMODE((tmp_path / "child.log").stat().st_mode) == 0o600
