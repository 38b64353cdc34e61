"""The podman tests' base image is debootstrapped from the Debian archive apt is configured with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch.kube.engine import debian_mirror


def test_the_mirror_comes_from_a_deb822_source(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SURREAL_KUBE_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "other.sources").write_text(
        "Types: deb\nURIs: http://mirror.test/nodejs\nSuites: nodistro\nComponents: main\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb-src\nURIs: http://mirror.test/src\nSuites: bookworm\n\n"
        "Types: deb\n# an older snapshot\nURIs: http://mirror.test/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.test/debian"


def test_the_mirror_comes_from_a_one_line_source(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SURREAL_KUBE_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb [signed-by=/k.gpg] http://mirror.test/debian bookworm main\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.test/debian"


def test_no_source_is_a_clear_error_and_the_variable_overrides(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SURREAL_KUBE_DEBIAN_MIRROR", raising=False)
    with pytest.raises(RuntimeError, match="SURREAL_KUBE_DEBIAN_MIRROR"):
        debian_mirror(tmp_path)
    monkeypatch.setenv("SURREAL_KUBE_DEBIAN_MIRROR", "http://mirror.test/x")
    assert debian_mirror(tmp_path) == "http://mirror.test/x"
