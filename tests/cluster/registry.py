"""A real OCI registry on a loopback port: the `registry` add-on (tests/cluster/go/registry,
go-containerregistry's pkg/registry), for the tests of what asks a registry (`create`'s image
check, `build --push`'s "is it there already").

`push_image` writes an image the way a client pushes one (distribution spec: blob uploads, then
the manifest under its tag), with a config blob and no layers: enough for a manifest that exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.addons import addon_bin_dir

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Registry:
    """A running loopback registry: `host` is `127.0.0.1:PORT`."""

    host: str

    def _call(
        self, method: str, url: str, body: bytes = b"", ctype: str = ""
    ) -> tuple[int, dict[str, str]]:
        req = urllib.request.Request(url, data=body or None, method=method)
        if ctype:
            req.add_header("Content-Type", ctype)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers)

    def _blob(self, repository: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        _, headers = self._call("POST", f"http://{self.host}/v2/{repository}/blobs/uploads/")
        location = headers["Location"]
        if location.startswith("/"):
            location = f"http://{self.host}{location}"
        sep = "&" if "?" in location else "?"
        self._call("PUT", f"{location}{sep}digest={digest}", data, "application/octet-stream")
        return digest

    def push_image(self, reference: str) -> None:
        """Push a config-only image as `reference` (`127.0.0.1:PORT/name:tag`)."""
        name, _, tag = reference.removeprefix(f"{self.host}/").rpartition(":")
        config = json.dumps(
            {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
        ).encode()
        digest = self._blob(name, config)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": digest,
                    "size": len(config),
                },
                "layers": [],
            }
        ).encode()
        self._call("PUT", f"http://{self.host}/v2/{name}/manifests/{tag}", manifest, MANIFEST_TYPE)


def registry_bin() -> Path | None:
    """The built registry binary, or None (`make cluster-addons` builds it)."""
    found = addon_bin_dir("registry")
    return found / "registry" if found else None


@contextmanager
def running_registry(log: Path) -> Iterator[Registry]:
    """Start the registry on a free loopback port; stop it (and its process group) after."""
    binary = registry_bin()
    if binary is None:
        raise RuntimeError("the registry add-on is not built: run `make cluster-addons`")
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [str(binary)], stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # "listening on 127.0.0.1:PORT", once it accepts
        if not line.startswith("listening on 127.0.0.1:"):
            proc.wait(timeout=10)
            raise RuntimeError(f"the registry did not start: {log.read_text()[-2000:]}")
        yield Registry(line.split()[-1])
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
