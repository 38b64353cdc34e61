"""Does a registry serve an image? Asked the way a kubelet pulls it: the OCI distribution API.

`create` used to check a built image in the local engine, where the cluster never looks: an image
built and not pushed passed, and the pods ended in ImagePullBackOff. Here the registry named by
the reference is asked for the manifest (`HEAD /v2/<name>/manifests/<tag>`), with the token
handshake registries use (`WWW-Authenticate: Bearer realm=...`), anonymous or with the
credentials the Docker config keeps for that host (`auths`, `credHelpers`, `credsStore`: the
`docker-credential-*` helpers, run with the host on stdin). Nothing of them is logged or kept.

Loopback registries are tried over HTTPS, then HTTP, as Docker treats 127.0.0.0/8 as insecure.
An answer that says neither yes nor no (unreachable, refused credentials) is `Unknown`: the
caller decides; `create` says so and goes on ("where it can ask").
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from surreal_kube.launch.kube.images.planner import split_reference

DOCKER_HUB = "registry-1.docker.io"
MANIFESTS = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Answer:
    """What the registry said: `present`, `missing`, or `unknown` with the reason."""

    status: Literal["present", "missing", "unknown"]
    reason: str = ""


def registry_host(reference: str) -> tuple[str, str]:
    """(host, repository path) of a reference, as Docker reads it (`a/b` is Docker Hub's)."""
    name, _tag = split_reference(reference)
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    path = name if "/" in name else f"library/{name}"
    return DOCKER_HUB, path


def _loopback(host: str) -> bool:
    bare = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 else host.strip("[]")
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def _docker_config() -> dict[str, object]:
    folder = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RuntimeError):
        return {}
    return data if isinstance(data, dict) else {}


def credentials(host: str) -> tuple[str, str] | None:
    """(user, secret) the Docker config keeps for `host`; None: ask anonymously."""
    config = _docker_config()
    helpers = config.get("credHelpers")
    helper = (helpers.get(host) if isinstance(helpers, dict) else None) or config.get("credsStore")
    if isinstance(helper, str) and helper:
        found = shutil.which(f"docker-credential-{helper}")
        if found:
            done = subprocess.run(
                [found, "get"], input=host, capture_output=True, text=True, timeout=30
            )
            if done.returncode == 0:
                try:
                    got = json.loads(done.stdout)
                    return str(got["Username"]), str(got["Secret"])
                except (ValueError, KeyError, TypeError):
                    return None
    auths = config.get("auths")
    entry = auths.get(host) or auths.get(f"https://{host}") if isinstance(auths, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("auth"), str):
        user, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
        return user, secret
    return None


def _basic(creds: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


def _request(url: str, method: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers=headers)
    context = ssl.create_default_context()
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=context) as resp:
            return resp.status, dict(resp.headers), resp.read() if method == "GET" else b""
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), b""


def _token(params: dict[str, str], creds: tuple[str, str] | None) -> str | None:
    realm = params.get("realm")
    if not realm:
        return None
    query = urllib.parse.urlencode({k: v for k, v in params.items() if k in ("service", "scope")})
    headers = {"Authorization": _basic(creds)} if creds else {}
    code, _, body = _request(f"{realm}?{query}" if query else realm, "GET", headers)
    if code != 200:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    token = data.get("token") or data.get("access_token")
    return str(token) if token else None


def manifest_exists(reference: str) -> Answer:
    """Whether the registry of `reference` serves its manifest (see the module docstring)."""
    host, path = registry_host(reference)
    _name, tag = split_reference(reference)
    schemes = ["https", "http"] if _loopback(host) else ["https"]
    last = ""
    for scheme in schemes:
        url = f"{scheme}://{host}/v2/{path}/manifests/{tag}"
        try:
            return _ask(url, host, path)
        except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
            last = f"{host} cannot be reached over {scheme} ({getattr(exc, 'reason', exc)})"
    return Answer("unknown", last)


def _ask(url: str, host: str, path: str) -> Answer:
    headers = {"Accept": MANIFESTS}
    code, got, _ = _request(url, "HEAD", headers)
    if code == 401:
        scheme, params = _challenge(got.get("WWW-Authenticate") or got.get("Www-Authenticate", ""))
        creds = credentials(host)
        if scheme == "bearer":
            params.setdefault("scope", f"repository:{path}:pull")
            token = _token(params, creds)
            if token is None:
                return Answer("unknown", f"{host} gave no pull token for {path}")
            code, _, _ = _request(url, "HEAD", headers | {"Authorization": f"Bearer {token}"})
        elif scheme == "basic" and creds:
            code, _, _ = _request(url, "HEAD", headers | {"Authorization": _basic(creds)})
    if code == 200:
        return Answer("present")
    if code == 404:
        return Answer("missing")
    if code in (401, 403):
        return Answer("unknown", f"{host} refused to say (HTTP {code}: no pull rights here)")
    return Answer("unknown", f"{host} answered HTTP {code}")
