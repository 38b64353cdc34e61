"""A real container engine for the image tests: podman's Docker-compatible API on a private socket.

No registry can be reached from here, so the base image is made with debootstrap (Debian bookworm,
minbase, python3.11 + venv + wheel) once and cached as a rootfs tarball in
~/.cache/surreal-kube/images/ (or $SURREAL_KUBE_IMAGE_CACHE); each session imports it into a
podman store of its own (under the cache too, so build layers are reused across sessions) and
serves that store on a temporary unix socket. Everything is stopped at the end.

The engine runs with runc and modest default ulimits (nofile 1024:4096, nproc 1024:2048; the machine's hard limits
are lower than podman's defaults), which lets RUN steps and `podman run` work in this VM.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BASE_IMAGE = "localhost/surreal-kube-test/python:bookworm"
DEBOOTSTRAP_PACKAGES = ("python3", "python3-venv", "python3-wheel")
NEEDED = ("podman", "debootstrap", "runc")
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:4096", "nproc=1024:2048"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def cache_dir() -> Path:
    """Where the base rootfs tarball and the podman store live between sessions."""
    env = os.environ.get("SURREAL_KUBE_IMAGE_CACHE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "surreal-kube" / "images"


def missing_tools() -> list[str]:
    """Commands the engine needs that are not installed (Makefile DEB_PACKAGES has them)."""
    return [t for t in NEEDED if shutil.which(t) is None]


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian archive apt is configured with here (debootstrap needs one): the first
    `deb` source whose suites include bookworm, from sources.list or a deb822 `.sources` file.

    Read from apt's own configuration, so the tests reach Debian's packages the way the machine
    does; `SURREAL_KUBE_DEBIAN_MIRROR` overrides it.
    """
    env = os.environ.get("SURREAL_KUBE_DEBIAN_MIRROR")
    if env:
        return env
    found: list[tuple[list[str], list[str], list[str]]] = []  # (types, uris, suites)
    for path in sorted((sources / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text(errors="replace").split("\n\n"):
            fields: dict[str, list[str]] = {}
            for line in stanza.splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.startswith(("#", " ", "\t")):
                    fields[key.strip().lower()] = value.split()
            if fields.get("enabled", ["yes"])[0].lower() != "no":
                found.append(
                    (fields.get("types", []), fields.get("uris", []), fields.get("suites", []))
                )
    lists = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            words = [w for w in line.split("#", 1)[0].split() if not w.startswith("[")]
            if len(words) >= 3:
                found.append(([words[0]], [words[1]], [words[2]]))
    for types, uris, suites in found:
        if "deb" in types and "bookworm" in suites and uris:
            return uris[0]
    raise RuntimeError(
        f"no Debian bookworm source in apt's configuration under {sources}; set "
        "SURREAL_KUBE_DEBIAN_MIRROR to the Debian archive to debootstrap the test base image from"
    )


def base_rootfs_tar() -> Path:
    """The cached debootstrap rootfs tarball, made on first use (about two minutes)."""
    tar = cache_dir() / "debian-bookworm-python3.tar"
    if tar.exists():
        return tar
    tar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tar.parent) as tmp:
        root = Path(tmp) / "rootfs"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(DEBOOTSTRAP_PACKAGES)}",
                "bookworm",
                str(root),
                debian_mirror(),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for junk in ("usr/share/doc", "usr/share/man", "usr/share/locale", "var/cache/apt"):
            shutil.rmtree(root / junk, ignore_errors=True)
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        partial = tar.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tar)
    return tar


@dataclass
class Engine:
    """A running `podman system service`, and the podman command line for the same store."""

    socket: Path
    root: Path
    runroot: Path
    conf: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        """DOCKER_HOST value for the docker SDK."""
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        return session_env(self.conf)

    def podman(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run `podman <args>` against this engine's store."""
        cmd = ["podman", "--root", str(self.root), "--runroot", str(self.runroot), *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=self.env(), check=False
        )

    def has_image(self, ref: str) -> bool:
        return self.podman("image", "exists", ref).returncode == 0


RUNROOT_LIMIT = 50  # podman: "the specified runroot is longer than 50 characters"


def runroot_of(store: Path) -> Path:
    """podman's runroot for the store at `store`: beside it when that path fits podman's limit,
    else a short one under /tmp named by the store's path (beside it is over the limit under
    a HOME of more than 12 characters: /home/runner's is exactly 50). Stable either way:
    podman's database remembers the runroot of its store and refuses another."""
    beside = store / "run"
    if len(str(beside)) <= RUNROOT_LIMIT:
        return beside
    digest = hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:12]
    return Path("/tmp") / f"sk-podman-run-{digest}"


def session_env(conf: Path) -> dict[str, str]:
    """The environment of the service and of every podman command of a session: its
    containers.conf, and its temporary files (build contexts, image copies, exports) in the
    session's directory. Under /var/tmp, podman's default, a service stopped mid-build left
    them there: 7 GB of them were found from a run hours before."""
    return {**os.environ, "CONTAINERS_CONF": str(conf), "TMPDIR": str(conf.parent / "tmp")}


def start_service(store: Path, tmp: Path) -> Engine:
    """`podman system service` for the store at `store`, on a socket in tmp, once it listens;
    RuntimeError with podman's own words if it exits or is not up within 30 s."""
    conf = tmp / "containers.conf"
    (tmp / "tmp").mkdir()
    conf.write_text(CONTAINERS_CONF + f'image_copy_tmp_dir = "{tmp / "tmp"}"\n')
    socket = tmp / "podman.sock"
    log = tmp / "podman-service.log"
    runroot = runroot_of(store)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                "podman",
                "--root",
                str(store / "storage"),
                "--runroot",
                str(runroot),
                "system",
                "service",
                "--time=0",
                f"unix://{socket}",
            ],
            env=session_env(conf),
            stdout=subprocess.DEVNULL,
            stderr=out,
            start_new_session=True,
        )
    engine = Engine(socket, store / "storage", runroot, conf, proc)
    deadline = time.monotonic() + 30
    while not socket.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_service(engine)
            said = log.read_text(errors="replace").strip()[-2000:] or "(nothing on stderr)"
            raise RuntimeError(f"podman system service for {store} did not start: {said}")
        time.sleep(0.1)
    return engine


def stop_service(engine: Engine) -> None:
    """Stop the service (and only it): SIGTERM to its process group, SIGKILL after 20 s."""
    proc = engine.process
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def superseded_images(images: list[dict[str, Any]]) -> list[str]:
    """The names in `podman images --format json` that a newer image of the same repository
    has replaced (the base image is never one).

    Every change of the package's source gives the runtime image a new content tag, and
    nothing removed the old ones: the store had grown to 17 GB here when CI's disk filled and
    its real node reported DiskPressure. The newest image of each repository is the one the
    tests build on; the layers it shares with the old ones stay."""
    newest: dict[str, int] = {}
    for image in images:
        for name in image.get("Names") or []:
            repo = name.rpartition(":")[0]
            newest[repo] = max(newest.get(repo, 0), int(image.get("Created") or 0))
    return [
        name
        for image in images
        for name in image.get("Names") or []
        if name != BASE_IMAGE and int(image.get("Created") or 0) < newest[name.rpartition(":")[0]]
    ]


def prune_store(engine: Engine) -> str:
    """Untag the superseded images, then remove the dangling ones (an untagged image left by a
    rebuild): what a session finds when no other session uses the store. Says what it freed."""
    listed = engine.podman("images", "--format", "json")
    if listed.returncode != 0:
        return f"podman images failed: {listed.stderr.strip()[-500:]}"
    stale = superseded_images(json.loads(listed.stdout or "[]"))
    removed = engine.podman("rmi", *stale) if stale else None
    pruned = engine.podman("image", "prune", "--force")
    failed = [d.stderr.strip()[-300:] for d in (removed, pruned) if d and d.returncode != 0]
    gone = len([line for line in pruned.stdout.splitlines() if line.strip()])
    return f"untagged {len(stale)} superseded, removed {gone} dangling" + (
        f"; podman said: {' / '.join(failed)}" if failed else ""
    )


@contextlib.contextmanager
def _store_session(store: Path) -> Iterator[Callable[[], bool]]:
    """Hold the store for a session: shared, so that sessions run side by side, but exclusive
    first when no other session holds it. Yields `alone()`: true once, in that exclusive
    moment, when pruning cannot remove what another session is building on; the hold is
    shared from the call on."""
    with (store / ".sessions.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            exclusive = True
        except BlockingIOError:
            fcntl.flock(lock, fcntl.LOCK_SH)
            exclusive = False

        def alone() -> bool:
            nonlocal exclusive
            was, exclusive = exclusive, False
            if was:
                fcntl.flock(lock, fcntl.LOCK_SH)
            return was

        try:
            yield alone
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def podman_engine() -> Iterator[Engine]:
    """Start podman's API service on a private socket; stop it (and only it) at the end.

    A session alone on the store prunes it first (`prune_store`)."""
    store = cache_dir() / "podman"
    store.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="sk-podman-") as tmp,
        _store_session(store) as alone,
    ):
        engine = start_service(store, Path(tmp))
        try:
            if alone():
                print(f"podman store {store}: {prune_store(engine)}", file=sys.stderr)
            if not engine.has_image(BASE_IMAGE):
                done = engine.podman("import", str(base_rootfs_tar()), BASE_IMAGE)
                if done.returncode != 0:
                    raise RuntimeError(f"podman import failed: {done.stderr}")
            yield engine
        finally:
            stop_service(engine)


def engine_or_skip() -> Iterator[Engine]:
    """The body of a module's `engine` fixture: podman's API for the module, or a skip naming
    the Debian packages that are missing (`make deb` installs them)."""
    import pytest

    missing = missing_tools()
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (Makefile DEB_PACKAGES)")
    with podman_engine() as eng:
        yield eng
