"""A local experiment's CURVE key: written at create, 0600 in the experiment's 0700 folder."""

from __future__ import annotations

import stat
from pathlib import Path

from surreal_kube.experiment.resolve import default_document, validate_document
from surreal_kube.launch.local.backend import prepare
from surreal_kube.launch.local.keys import KEY_FILE


def test_create_writes_a_private_key_file_in_a_private_folder(tmp_path: Path) -> None:
    exp = validate_document(default_document("keyed", "ppo"))
    _, folder, _, _ = prepare(exp, root=tmp_path)
    key = folder.path / KEY_FILE
    assert stat.S_IMODE(folder.path.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key.read_text()
    _, again, _, _ = prepare(exp, root=tmp_path, replace=True)
    assert (again.path / KEY_FILE).read_text() != first  # a fresh keypair per create


def test_the_file_is_what_the_roles_read(tmp_path: Path) -> None:
    from surreal_kube.comm import curve

    exp = validate_document(default_document("keyed", "ppo"))
    _, folder, _, _ = prepare(exp, root=tmp_path)
    assert curve.KEY_FILE == KEY_FILE
    keys = curve.load_key_file(folder.path / KEY_FILE)
    assert keys.secret.decode() not in repr(keys)
