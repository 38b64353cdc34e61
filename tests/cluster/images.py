"""Tiny container images for the real test node, written here as docker-archive tarballs.

No container registry is reachable from the test machines, so the node's pause (sandbox) image,
its CoreDNS image and the small test image are written by this module from binaries that exist
on the machine: the pinned builds of tests/cluster/build-node.sh and Debian's static busybox.
`RealNode.import_image()` loads such an archive (or one saved by podman) into containerd's
`k8s.io` namespace, where the kubelet finds it.

The archive is the format `docker save` / `podman save` write (manifest.json, a config blob, one
uncompressed layer tar), which `ctr images import` reads. Layers are reproducible: sorted
entries, mtime 0, owner root.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

PAUSE_IMAGE = "localhost/surreal-kube/pause:3.10"
COREDNS_IMAGE = "localhost/surreal-kube/coredns:v1.15.0"
KUBE_PROXY_IMAGE = "localhost/surreal-kube/kube-proxy:v1.37.2"
XTABLES = Path("/usr/sbin/xtables-nft-multi")  # Debian's iptables, nf_tables backend
XTABLES_MODULES = Path("/usr/lib/x86_64-linux-gnu/xtables")
IPTABLES_NAMES = tuple(
    f"{family}{suffix}"
    for family in ("iptables", "ip6tables")
    for suffix in ("", "-save", "-restore")
)
TEST_IMAGE = "localhost/surreal-kube/busybox:test"
"""busybox (Debian's busybox-static): sh, nslookup, wget, httpd, nc... for the node tests."""
BUSYBOX = Path("/bin/busybox")
BUSYBOX_APPLETS = (
    "sh", "ls", "cat", "echo", "sleep", "nslookup", "wget", "httpd", "nc", "hostname", "env",
    "ps", "kill", "true", "false", "mkdir", "id", "printf", "grep", "test", "ip", "seq",
    "head", "tail", "sed", "cut", "tr", "date", "uname", "rm", "cp", "mv", "touch", "wc", "timeout",
)  # fmt: skip


class ImageError(RuntimeError):
    """An image could not be written."""


def write_image(
    archive: str | os.PathLike[str],
    ref: str,
    files: Mapping[str, str | os.PathLike[str] | bytes],
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Sequence[str] = ("PATH=/bin:/usr/bin:/sbin:/usr/sbin",),
    symlinks: Mapping[str, str] | None = None,
    dirs: Sequence[str] = ("tmp", "etc"),
) -> Path:
    """Write a one-layer linux/amd64 image as a docker-archive tarball and return its path.

    files maps a path in the image (relative, e.g. "bin/busybox") to a host file or to bytes;
    files copied from the host keep their mode. symlinks maps a path in the image to its target.
    """
    layer = _layer_tar(files, symlinks or {}, dirs)
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": list(env),
            "Entrypoint": list(entrypoint) or None,
            "Cmd": list(cmd) or None,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created_by": "tests/cluster/images.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [f"{layer_digest}/layer.tar"]}]
    out = Path(archive)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, f"{layer_digest}/layer.tar", layer)
        _add_bytes(tar, config_name, config_bytes)
        _add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
    tmp.replace(out)
    return out


def pause_image(archive: str | os.PathLike[str], pause_binary: Path) -> Path:
    """The pod sandbox image: the pause program built from tests/cluster/go/pause."""
    return write_image(archive, PAUSE_IMAGE, {"pause": pause_binary}, entrypoint=["/pause"])


def coredns_image(archive: str | os.PathLike[str], coredns_binary: Path) -> Path:
    """CoreDNS, as the cluster DNS of the real node (a static binary, nothing else)."""
    return write_image(archive, COREDNS_IMAGE, {"coredns": coredns_binary}, entrypoint=["/coredns"])


def kube_proxy_image(archive: str | os.PathLike[str], kube_proxy_binary: Path) -> Path:
    """kube-proxy with the host's iptables (nf_tables backend), its extension modules and the
    shared libraries they load, gathered with ldd: what kube-proxy runs in iptables mode."""
    if not XTABLES.is_file():
        raise ImageError(f"{XTABLES} is missing: install Debian's iptables (`make deb` does)")
    modules = sorted(XTABLES_MODULES.glob("*.so"))
    files: dict[str, str | os.PathLike[str] | bytes] = {
        "usr/local/bin/kube-proxy": kube_proxy_binary,
        "usr/sbin/xtables-nft-multi": XTABLES,
    }
    for module in modules:
        files[str(module).lstrip("/")] = module
    for lib in shared_libraries([XTABLES, *modules]):
        files[str(lib).lstrip("/")] = lib.resolve()
    links = {f"usr/sbin/{name}": "xtables-nft-multi" for name in IPTABLES_NAMES}
    return write_image(
        archive,
        KUBE_PROXY_IMAGE,
        files,
        entrypoint=["/usr/local/bin/kube-proxy"],
        env=("PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
        symlinks=links,
        dirs=("tmp", "etc", "run", "var/lib"),
    )


def shared_libraries(programs: Sequence[Path]) -> list[Path]:
    """The shared libraries (and the loader) that programs load, as ldd names them."""
    import subprocess

    found: set[Path] = set()
    for program in programs:
        out = subprocess.run(["ldd", str(program)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                found.add(Path(parts[2]))
            elif parts and parts[0].startswith("/"):
                found.add(Path(parts[0]))  # the loader: /lib64/ld-linux-x86-64.so.2
    return sorted(found)


def busybox_image(archive: str | os.PathLike[str], busybox: Path = BUSYBOX) -> Path:
    """The small test image: Debian's static busybox with the applets the node tests use."""
    if not busybox.is_file():
        raise ImageError(f"{busybox} is missing: install Debian's busybox-static (`make deb` does)")
    links = {f"bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS}
    return write_image(archive, TEST_IMAGE, {"bin/busybox": busybox}, cmd=["sh"], symlinks=links)


def _layer_tar(
    files: Mapping[str, str | os.PathLike[str] | bytes],
    symlinks: Mapping[str, str],
    dirs: Sequence[str],
) -> bytes:
    buf = io.BytesIO()
    entries: dict[str, tuple[str, object]] = {}
    for path in files:
        parts = Path(path).parts
        for i in range(1, len(parts)):
            entries.setdefault("/".join(parts[:i]), ("dir", None))
    for d in dirs:
        entries.setdefault(d, ("dir", None))
    for path, src in files.items():
        entries[str(Path(path))] = ("file", src)
    for path, target in symlinks.items():
        entries[str(Path(path))] = ("link", target)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            kind, src = entries[name]
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o1777 if name == "tmp" else 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = str(src)
                info.mode = 0o777
                tar.addfile(info)
            elif isinstance(src, bytes):
                info.size = len(src)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(src))
            else:
                host = Path(src)  # type: ignore[arg-type]
                data = host.read_bytes()
                info.size = len(data)
                info.mode = host.stat().st_mode & 0o7777
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
