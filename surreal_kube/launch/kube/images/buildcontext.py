"""Build contexts: which files an image is built from, their content hash, and the tar we send.

An image build is a Dockerfile plus one or more context directories (merged in order; a later
directory's file wins over an earlier one at the same path). Files are filtered like `docker
build` does: by `<Dockerfile>.dockerignore` next to the Dockerfile when it exists (BuildKit's
rule, so one repository can hold several images with different ignore lists), else by each
context directory's own `.dockerignore`, else by `<Dockerfile>.default.dockerignore` (a Dockerfile
that builds other people's folders, such as the user-project image, brings sensible defaults
that a folder's own `.dockerignore` replaces).

The content hash covers exactly what the engine receives: the Dockerfile's bytes, the build
arguments, the target platform (`linux/amd64`: the same files built for another architecture are
another image) and every file's path, executable bit and bytes (symlinks by target). Modification
times, owners and the order of the file system are left out, so a fresh clone hashes the same.
The tar is built the same way (sorted, mtime 0, uid 0), so identical inputs give identical bytes.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from surreal_kube.errors import LaunchError

DOCKERFILE_IN_CONTEXT = ".surreal-kube.Dockerfile"
"""Where the Dockerfile goes inside the tar (it may live outside every context directory)."""
HASH_SCHEME = b"surreal-kube build context v1\n"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ContextEntry:
    """One file, directory or symlink of a merged build context."""

    arcname: str
    source: Path
    kind: str
    """`file`, `dir` or `link`."""
    executable: bool = False
    target: str = ""
    """Symlink target."""


def ignore_patterns(dockerfile: Path, context: Path) -> list[str]:
    """The .dockerignore patterns that apply to `context` for this Dockerfile."""
    candidates = (
        Path(f"{dockerfile}.dockerignore"),
        context / ".dockerignore",
        Path(f"{dockerfile}.default.dockerignore"),
    )
    for candidate in candidates:
        if candidate.is_file():
            lines = candidate.read_text(encoding="utf-8").splitlines()
            return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    return []


def collect(dockerfile: Path, contexts: Sequence[Path]) -> list[ContextEntry]:
    """The merged, filtered entries of the context directories, sorted by path."""
    from docker.utils.build import PatternMatcher

    if not dockerfile.is_file():
        raise LaunchError(f"Dockerfile {str(dockerfile)!r} does not exist")
    merged: dict[str, ContextEntry] = {}
    for context in contexts:
        if not context.is_dir():
            raise LaunchError(f"build context {str(context)!r} is not a directory")
        matcher = PatternMatcher(ignore_patterns(dockerfile, context))
        for rel in matcher.walk(str(context)):
            path = context / rel
            arcname = Path(rel).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                entry = ContextEntry(arcname, path, "link", target=os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                entry = ContextEntry(arcname, path, "dir")
            elif stat.S_ISREG(info.st_mode):
                entry = ContextEntry(arcname, path, "file", bool(info.st_mode & 0o111))
            else:
                continue  # sockets, fifos: docker skips them too
            merged[arcname] = entry
    return [merged[k] for k in sorted(merged)]


def content_hash(
    dockerfile: Path,
    contexts: Sequence[Path],
    build_args: Mapping[str, str] | None = None,
    platform: str | None = None,
) -> str:
    """sha256 (hex) of the Dockerfile, build arguments, platform and merged context (module
    docstring). `platform` None (an image of files, such as the wheels image) hashes as before."""
    entries = collect(dockerfile, contexts)  # checks that the Dockerfile and contexts exist
    digest = hashlib.sha256(HASH_SCHEME)
    digest.update(b"dockerfile\0" + dockerfile.read_bytes() + b"\0")
    if platform is not None:
        digest.update(f"platform\0{platform}\0".encode())
    for key, value in sorted((build_args or {}).items()):
        digest.update(f"arg\0{key}\0{value}\0".encode())
    for entry in entries:
        digest.update(f"{entry.kind}\0{entry.arcname}\0".encode())
        if entry.kind == "file":
            digest.update(b"x\0" if entry.executable else b"-\0")
            digest.update(_file_digest(entry.source) + b"\0")
        elif entry.kind == "link":
            digest.update(entry.target.encode() + b"\0")
    return digest.hexdigest()


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.digest()


def write_tar(dockerfile: Path, contexts: Sequence[Path], fileobj: BinaryIO) -> None:
    """Write the build context as an uncompressed tar, the Dockerfile at DOCKERFILE_IN_CONTEXT."""
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in collect(dockerfile, contexts):
            info = tarfile.TarInfo(entry.arcname)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif entry.kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
                info.mode = 0o777
                tar.addfile(info)
            else:
                info.mode = 0o755 if entry.executable else 0o644
                info.size = entry.source.stat().st_size
                with entry.source.open("rb") as f:
                    tar.addfile(info, f)
        data = dockerfile.read_bytes()
        info = tarfile.TarInfo(DOCKERFILE_IN_CONTEXT)
        info.mtime, info.mode, info.size = 0, 0o644, len(data)
        tar.addfile(info, io.BytesIO(data))
