"""An experiment's CURVE key file: its format, and the one writer of it.

On Kubernetes the renderer puts a fresh keypair (`key_file_text`) into the experiment's Secret,
mounted read-only into every pod, and every role makes its sockets CURVE sockets with it
(`comm.curve`): other pods share the network. A local run writes no key file: its sockets are
Unix sockets in a folder only its user can enter (`launch/local/sockets.py`). `write_keys`
writes the file where a process is to find it beside the experiment folder (the runtime tests'
harness, which talks TCP as pods do, and the benchmarks).

`launch` may not import `comm` (backends start roles as commands), so the file's format is
written here and read by `comm.curve.load_key_file`; a test checks that the two agree.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

KEY_FILE = "curve.key"
"""As `comm.curve.KEY_FILE`: the name roles look for in the experiment folder."""


def key_file_text() -> str:
    """A fresh keypair in the key file's format (JSON, Z85 keys; libzmq's CSPRNG)."""
    import zmq  # here, not at the top: the CLI imports launch and only create needs ZeroMQ

    public, secret = zmq.curve_keypair()
    return json.dumps({"public": public.decode(), "secret": secret.decode()}) + "\n"


def write_keys(experiment_dir: Path, text: str | None = None) -> Path:
    """Write a key file into `experiment_dir` (which must exist): `text` (the key file's
    content), else a fresh keypair; 0600 from its first byte (mkstemp creates 0600 whatever the
    umask), replacing any earlier file atomically. The one writer of key files."""
    path = experiment_dir / KEY_FILE
    fd, tmp = tempfile.mkstemp(dir=experiment_dir, prefix=f".{KEY_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key_file_text() if text is None else text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
