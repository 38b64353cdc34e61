"""The podman tests' engine starts wherever its cache is: podman refuses a runroot of over 50
characters, and the store's runroot lived beside it, under the cache. A cold run whose HOME
was /work/coldhome (the runroot 52 characters) failed every podman and end-to-end test at setup
with "podman system service did not start", and nothing said why (under /home/runner it is
exactly 50)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.launch.kube.engine import (
    RUNROOT_LIMIT,
    Engine,
    missing_tools,
    runroot_of,
    start_service,
    stop_service,
)

pytestmark = pytest.mark.podman


@pytest.fixture(autouse=True)
def _podman_installed() -> None:
    if missing_tools():
        pytest.skip(f"needs {', '.join(missing_tools())} (Makefile DEB_PACKAGES)")


@pytest.fixture
def long_store(tmp_path: Path) -> Iterator[Path]:
    """A store whose runroot beside it would be over podman's limit; reset and removed after."""
    store = tmp_path / "a-cache-under-a-long-home" / "podman"
    assert len(str(store / "run")) > RUNROOT_LIMIT
    yield store
    if (store / "storage").exists():  # podman keeps its storage driver's mount: reset unmounts
        subprocess.run(
            ["podman", "--root", str(store / "storage"), "--runroot", str(runroot_of(store)),
             "system", "reset", "--force"],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
    shutil.rmtree(runroot_of(store), ignore_errors=True)


def test_a_store_under_a_long_path_serves_the_docker_api(long_store: Path) -> None:
    runroot = runroot_of(long_store)
    assert len(str(runroot)) <= RUNROOT_LIMIT
    assert runroot_of(long_store) == runroot, "podman's database remembers it: it must not move"
    with tempfile.TemporaryDirectory(prefix="sk-podman-") as tmp:
        engine: Engine = start_service(long_store, Path(tmp))
        try:
            client = docker.DockerClient(base_url=engine.url)
            try:
                assert client.ping()
                assert client.images.list() == []
            finally:
                client.close()
        finally:
            stop_service(engine)


def test_a_service_that_cannot_start_says_what_podman_said(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "storage").parent.mkdir(parents=True)
    (store / "storage").write_text("a file where podman wants its storage directory")
    try:
        with (
            tempfile.TemporaryDirectory(prefix="sk-podman-") as tmp,
            pytest.raises(RuntimeError, match=r"did not start: .*\S"),
        ):
            start_service(store, Path(tmp))
    finally:
        shutil.rmtree(runroot_of(store), ignore_errors=True)  # podman may have made it
