"""The experiment's CURVE keys on this machine: a 0600 file in the experiment's 0700 folder.

Every role of a local experiment finds the file in its experiment folder
(`runtime.context.RoleContext.curve_key_file`) and makes all its sockets CURVE sockets with it
(`comm.curve`): another user of the machine can reach our 127.0.0.1 ports but cannot read the
key, so the handshake refuses them. A fresh keypair per create: a leftover process of an earlier
run of the same name holds the old key and cannot talk to the new run either.

`launch` may not import `comm` (backends start roles as commands), so the file's format is
written here and read by `comm.curve.load_key_file`; a test checks that the two agree. The
Kubernetes renderer puts the same text into the experiment's Secret (`key_file_text`).
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
