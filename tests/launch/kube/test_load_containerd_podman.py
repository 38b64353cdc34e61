"""`load_into_containerd` (what `surreal-kube build --load` runs) against a real containerd: the
pinned containerd v2 and ctr the real node is built with (tests/cluster/build-node.sh), started
here on a private socket and root, and a small image built through podman's Docker API.

The real runtime image on the real node is tests/e2e/test_runtime_image.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.images import engine as image_engine
from surreal_kube.launch.kube.images import load as image_load
from surreal_kube.launch.kube.images import planner as images
from tests.launch.kube.engine import (
    BASE_IMAGE,
    Engine,
    engine_or_skip,
)

pytestmark = [pytest.mark.podman, pytest.mark.node, pytest.mark.slow]  # the node's containerd

CONFIG = """\
version = 3
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images",
                    "io.containerd.cri.v1.runtime"]
[grpc]
  address = "{root}/containerd.sock"
[ttrpc]
  address = "{root}/containerd.sock.ttrpc"
"""


@dataclass
class Containerd:
    socket: str
    ctr: str

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [self.ctr, "--address", self.socket, "--namespace", "k8s.io", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    def names(self) -> list[str]:
        return self.run("images", "ls", "-q").stdout.split()


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    yield from engine_or_skip()


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Containerd]:
    from tests.cluster import node

    bin_dir = node.built_node_bin_dir()
    if bin_dir is None or not (bin_dir / "containerd").exists():
        pytest.skip("containerd is not built: run `make node` (tests/cluster/README.md)")
    # a short path: unix socket paths are limited to 108 bytes
    root = Path(tmp_path_factory.mktemp("ctd"))
    conf = root / "config.toml"
    conf.write_text(CONFIG.format(root=root))
    sock = root / "containerd.sock"
    proc = subprocess.Popen(
        [str(bin_dir / "containerd"), "--config", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=(root / "containerd.log").open("wb"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.is_socket():
            assert proc.poll() is None, (root / "containerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not start"
            time.sleep(0.1)
        yield Containerd(str(sock), str(bin_dir / "ctr"))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        subprocess.run(["umount", "-R", "-l", str(root / "root")], capture_output=True)


def test_load_imports_under_the_kubelets_name_once_and_tags_the_rest(
    engine: Engine, containerd: Containerd, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(
        f'FROM {BASE_IMAGE}\nRUN echo {uuid.uuid4().hex} > /stamp\nCMD ["cat", "/stamp"]\n'
    )
    repo = f"sk-test-{uuid.uuid4().hex[:8]}/tiny"
    exp = resolve_experiment(
        "exp-img",
        sets=[
            f"images.cpu.build.dockerfile={tmp_path}/Dockerfile",
            f"images.cpu.build.context=[{tmp_path}]",
            f"images.cpu.build.repository={repo}",
        ],
    )
    client = image_engine.docker_client(engine.url)
    said: list[str] = []
    try:
        plans = image_engine.build_images(
            image_engine.plan_images(exp, client=client, keys=["cpu"]), client
        )
        (plan,) = plans
        second = image_engine.release_tag(plan, client, "9.9.9")
        assert second.reference == f"{repo}:9.9.9"

        loaded = image_load.load_into_containerd(
            [plan, second],
            client,
            address=containerd.socket,
            ctr=containerd.ctr,
            progress=said.append,
        )
        assert [p.status for p in loaded] == ["loaded", "loaded"]
        full = f"docker.io/{plan.reference}"  # what a kubelet asks for `repo:tag`
        assert {full, f"docker.io/{repo}:9.9.9"} <= set(containerd.names())
        assert [line.split()[0] for line in said] == ["loading", "tagging"]  # one export
        check = containerd.run("images", "check", f"name=={full}")
        assert check.stdout.split()[-1] == "true", check.stdout  # unpacked for the kubelet
        # and only once: the layers' blobs are left to containerd's collector, not kept beside
        # the snapshots (the manifest no longer holds them)
        manifest = check.stdout.splitlines()[-1].split()[2]
        (row,) = [
            r for r in containerd.run("content", "ls").stdout.splitlines() if r.startswith(manifest)
        ]
        assert "gc.ref.content.config" in row and "gc.ref.content.l." not in row, row

        # again: the content-hash tag is there already, nothing is exported
        said.clear()
        image_load.load_into_containerd(
            [plan], client, address=containerd.socket, ctr=containerd.ctr, progress=said.append
        )
        assert said == [f"{full} is in containerd already (same content-hash tag)"]
    finally:
        listed = engine.podman("images", "-q", "--filter", f"reference=*{repo}*")
        for image_id in set(listed.stdout.split()):
            engine.podman("rmi", "-f", image_id)
        for name in containerd.names():
            if repo in name:
                containerd.run("images", "rm", name)


def test_a_kept_version_tag_reaches_a_node_that_lacks_it_and_never_moves(
    engine: Engine, containerd: Containerd, tmp_path: Path
) -> None:
    """A later build leaves `<repo>:<version>` on the first (status "kept"); `--load` still puts
    that tag into a node without it (the chart's operator image), and leaves a node's copy as is.
    Before, a kept tag was not loaded at all: the CI node had no operator image."""
    repo = f"sk-test-{uuid.uuid4().hex[:8]}/tiny"
    client = image_engine.docker_client(engine.url)
    built = []
    try:
        for n in range(2):
            folder = tmp_path / str(n)
            folder.mkdir()
            (folder / "Dockerfile").write_text(
                f"FROM {BASE_IMAGE}\nRUN echo {uuid.uuid4().hex} > /stamp\n"
            )
            exp = resolve_experiment(
                "exp-img",
                sets=[
                    f"images.cpu.build.dockerfile={folder}/Dockerfile",
                    f"images.cpu.build.context=[{folder}]",
                    f"images.cpu.build.repository={repo}",
                ],
            )
            (plan,) = image_engine.build_images(
                image_engine.plan_images(exp, client=client, keys=["cpu"]), client
            )
            built.append(plan)
        first = image_engine.release_tag(built[0], client, "9.9.9")
        kept = image_engine.release_tag(built[1], client, "9.9.9")
        assert (first.status, kept.status) == ("built", "kept")
        assert client.images.get(kept.reference).id == client.images.get(built[0].reference).id

        said: list[str] = []
        (loaded,) = image_load.load_into_containerd(
            [kept], client, address=containerd.socket, ctr=containerd.ctr, progress=said.append
        )
        full = f"docker.io/{repo}:9.9.9"
        assert loaded.status == "loaded" and full in containerd.names(), said

        said.clear()
        (again,) = image_load.load_into_containerd(
            [kept], client, address=containerd.socket, ctr=containerd.ctr, progress=said.append
        )
        assert again.status == "kept"
        assert said == [f"{full} is in containerd already (a version tag: kept as it is)"]
    finally:
        listed = engine.podman("images", "-q", "--filter", f"reference=*{repo}*")
        for image_id in set(listed.stdout.split()):
            engine.podman("rmi", "-f", image_id)
        for name in containerd.names():
            if repo in name:
                containerd.run("images", "rm", name)


def test_a_broken_import_is_reported(engine: Engine, containerd: Containerd) -> None:
    from surreal_kube.errors import LaunchError

    plan = images.ImagePlan("cpu", BASE_IMAGE, "present")
    # ctr for a namespace name containerd refuses: the import fails, and says so
    with pytest.raises(LaunchError, match=r"ctr images ls failed|ctr images import"):
        image_load.load_into_containerd(
            [plan],
            image_engine.docker_client(engine.url),
            address=containerd.socket,
            ctr=containerd.ctr,
            namespace="Not A Namespace!",
        )
