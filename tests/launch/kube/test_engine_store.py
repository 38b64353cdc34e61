"""The podman tests' engine and its store.

It starts wherever its cache is: podman refuses a runroot of over 50 characters, and the
store's runroot lived beside it, under the cache. A cold run whose HOME was /work/coldhome (the
runroot 52 characters) failed every podman and end-to-end test at setup with "podman system
service did not start", and nothing said why (under /home/runner it is exactly 50).

It stays bounded: nothing removed superseded images, and the store had grown to 17 GB when CI's
disk filled and its real node reported DiskPressure."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.launch.kube.engine import (
    BASE_IMAGE,
    RUNROOT_LIMIT,
    Engine,
    _store_session,
    missing_tools,
    prune_store,
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
def small_store(tmp_path: Path) -> Iterator[Engine]:
    """A running engine on a store of its own; reset and removed after."""
    store = tmp_path / "store"
    with tempfile.TemporaryDirectory(prefix="sk-podman-") as tmp:
        engine = start_service(store, Path(tmp))
        try:
            yield engine
        finally:
            stop_service(engine)
            _reset(store)


def _reset(store: Path) -> None:
    if (store / "storage").exists():  # podman keeps its storage driver's mount: reset unmounts
        subprocess.run(
            ["podman", "--root", str(store / "storage"), "--runroot", str(runroot_of(store)),
             "system", "reset", "--force"],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
    shutil.rmtree(runroot_of(store), ignore_errors=True)


@pytest.fixture
def long_store(tmp_path: Path) -> Iterator[Path]:
    """A store whose runroot beside it would be over podman's limit; reset and removed after."""
    store = tmp_path / "a-cache-under-a-long-home" / "podman"
    assert len(str(store / "run")) > RUNROOT_LIMIT
    yield store
    _reset(store)


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


def _import(engine: Engine, tmp: Path, ref: str, content: str) -> str:
    """A one-file image made with `podman import`; its id."""
    tar = tmp / f"{content}.tar"
    with tarfile.open(tar, "w") as out:
        data = content.encode()
        info = tarfile.TarInfo("content")
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
    done = engine.podman("import", str(tar), ref)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1].removeprefix("sha256:")


def test_pruning_keeps_the_newest_of_each_repository_and_the_base(
    small_store: Engine, tmp_path: Path
) -> None:
    base = _import(small_store, tmp_path, BASE_IMAGE, "base")
    old = _import(small_store, tmp_path, "surreal-kube/runtime-cpu:0ld", "old")
    also_old = _import(small_store, tmp_path, "surreal-kube/runtime-cpu:0.1.0", "version")
    dangling = _import(small_store, tmp_path, "mypkg/app:x", "first")
    time.sleep(1.1)  # podman's creation times are in seconds
    _import(small_store, tmp_path, "mypkg/app:x", "second")  # leaves the first untagged
    new = _import(small_store, tmp_path, "surreal-kube/runtime-cpu:new", "new")

    said = prune_store(small_store)

    assert said == "untagged 2 superseded, removed 1 dangling", said
    left = set(small_store.podman("images", "-q", "--no-trunc").stdout.split())
    ids = {i.removeprefix("sha256:") for i in left}
    assert {base, new} <= ids and not {old, also_old, dangling} & ids, (ids, said)
    assert small_store.has_image("mypkg/app:x") and small_store.has_image(BASE_IMAGE)


def test_only_a_session_alone_on_the_store_may_prune(tmp_path: Path) -> None:
    """A session alone holds the store exclusively until it has pruned (one that comes then
    waits), then shares it."""
    with _store_session(tmp_path) as first:
        assert first() and not first(), "the first session, alone, may prune once"
        with _store_session(tmp_path) as second:
            assert not second(), "a second session pruned beside the first"
    with _store_session(tmp_path) as later:
        assert later(), "a session alone again may prune"


def test_a_sessions_temporary_files_stay_in_its_directory(small_store: Engine) -> None:
    """Build contexts and image copies went to /var/tmp, podman's default, where a service
    stopped mid-build left them: 7 GB from a run hours before. Both the service (builds through
    the Docker API) and the command line now keep them in the session's directory."""
    session_tmp = str(small_store.conf.parent / "tmp")
    client = docker.DockerClient(base_url=small_store.url)
    try:
        info = client.api._get(client.api._url("/libpod/info"))
        assert info.status_code == 200, info.text
        assert info.json()["store"]["imageCopyTmpDir"] == session_tmp
    finally:
        client.close()
    said = small_store.podman("info", "--format", "{{.Store.ImageCopyTmpDir}}")
    assert said.stdout.strip() == session_tmp, said.stderr
