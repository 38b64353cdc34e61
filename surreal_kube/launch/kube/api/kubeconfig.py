"""Where the API server is and how to prove who we are: a kubeconfig or a pod's ServiceAccount.

Read the way kubectl reads them, with the standard library, PyYAML and urllib3 alone. The
official `kubernetes` package cost every cluster verb a large part of its start in imports before
its first request (its `__init__` brings in the dynamic client, OAuth, google-auth and, where
installed, jsonschema; `bench/scale.py` times `status` of 10,000 agents). It is still
what `exec` and port-forward use (their websocket streams), loaded only there.

What is understood, as kubectl does:
- `$KUBECONFIG` as a list of files (`:`-separated), merged name by name, the first file that
  names a cluster, user or context and the first `current-context` winning; else
  `~/.kube/config`. Relative file paths resolve against the file that holds them.
- clusters: `server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`,
  `tls-server-name`, `proxy-url`; users: `client-certificate(-data)` / `client-key(-data)`,
  `token`, `tokenFile` (re-read when it changes), `username`/`password`, and `exec` plugins
  (client.authentication.k8s.io ExecCredential: a token or a client certificate, run again when
  it expires or the server answers 401).
- A user with a legacy `auth-provider` (oidc, gcp) is loaded by the official client's loader,
  once: its token is used as it came.
- In a pod (no kubeconfig, `KUBERNETES_SERVICE_HOST` set): the ServiceAccount's token (re-read
  when the kubelet rotates it), CA and namespace.

Secrets stay in memory: a client key given as data reaches `ssl` through a private file that is
removed as soon as it is loaded (Python's `ssl` loads keys from files only).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surreal_kube.errors import LaunchError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)


class ConfigError(LaunchError):
    """The kubeconfig (or the pod's ServiceAccount) cannot be used; the message says why."""


class ContextError(ConfigError):
    """The kubeconfig is fine but names no such context (or no current one)."""


def default_paths() -> list[Path]:
    """The kubeconfig files kubectl would read: `$KUBECONFIG`'s entries, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def in_cluster_available() -> bool:
    """True where kubectl would use the pod's ServiceAccount: no `$KUBECONFIG`, no
    ~/.kube/config, and the API server's address set (as in every pod)."""
    return (
        not os.environ.get("KUBECONFIG")
        and not Path("~/.kube/config").expanduser().exists()
        and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    )


# --------------------------------------------------------------------------- the kubeconfig


@dataclass
class KubeConfig:
    """The merged kubeconfig files: clusters, users and contexts by name, each with the folder
    its relative paths are relative to."""

    clusters: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    current: str | None = None
    sources: list[Path] = field(default_factory=list)

    def context_names(self) -> list[str]:
        return list(self.contexts)


def load_config(path: str | os.PathLike[str] | None = None) -> KubeConfig:
    """Read and merge the kubeconfig files (`path`, else kubectl's defaults).

    ConfigError when none exists or one is not a kubeconfig.
    """
    import yaml

    paths = [Path(path).expanduser()] if path is not None else default_paths()
    merged = KubeConfig()
    for p in paths:
        if not p.exists():
            if path is not None:
                raise ConfigError(f"{p}: no such file")
            continue
        try:
            doc = yaml.safe_load(p.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{p}: not a readable kubeconfig: {exc}") from exc
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{p}: not a kubeconfig (a YAML mapping is expected)")
        merged.sources.append(p)
        base = p.resolve().parent
        for key, table in (("clusters", merged.clusters), ("users", merged.users)):
            inner = key[:-1]  # cluster, user
            for entry in _entries(doc, key, p):
                table.setdefault(entry["name"], (dict(entry.get(inner) or {}), base))
        for entry in _entries(doc, "contexts", p):
            merged.contexts.setdefault(entry["name"], dict(entry.get("context") or {}))
        if merged.current is None and doc.get("current-context"):
            merged.current = str(doc["current-context"])
    if not merged.sources:
        where = ", ".join(str(p) for p in paths) or "$KUBECONFIG"
        raise ConfigError(f"no kubeconfig found ({where})")
    return merged


def _entries(doc: Mapping[str, Any], key: str, path: Path) -> list[Mapping[str, Any]]:
    entries = doc.get(key) or []
    if not isinstance(entries, list) or not all(
        isinstance(e, Mapping) and isinstance(e.get("name"), str) for e in entries
    ):
        raise ConfigError(f"{path}: {key} must be a list of entries with a name")
    return entries


# --------------------------------------------------------------------------- credentials


@dataclass
class Credentials:
    """One API server and one identity: what every request needs, refreshed where it expires."""

    server: str
    context: str
    namespace: str | None = None
    ca_pem: bytes | None = None
    verify: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None
    token_file: Path | None = None
    basic: tuple[str, str] | None = None
    exec_plugin: ExecPlugin | None = None
    in_cluster: bool = False
    """The pod's ServiceAccount, not a kubeconfig."""
    _file_token: tuple[float, str] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def authorization(self) -> str | None:
        """The Authorization header's value now (a rotated token file or an expired exec
        credential is read or run again)."""
        if self.exec_plugin is not None:
            issued = self.exec_plugin.credential()
            if issued.token:
                return f"Bearer {issued.token}"
        if self.token_file is not None:
            return f"Bearer {self._read_token_file()}"
        if self.token:
            return f"Bearer {self.token}"
        if self.basic is not None:
            pair = f"{self.basic[0]}:{self.basic[1]}".encode()
            return f"Basic {base64.b64encode(pair).decode()}"
        return None

    def unauthorized(self) -> bool:
        """The server answered 401: True when a fresh credential is worth one more try."""
        if self.exec_plugin is not None:
            self.exec_plugin.expire()
            return True
        if self.token_file is not None:
            with self._lock:
                self._file_token = None
            return True
        return False

    def _read_token_file(self) -> str:
        assert self.token_file is not None
        try:
            stamp = self.token_file.stat().st_mtime
            with self._lock:
                if self._file_token is not None and self._file_token[0] == stamp:
                    return self._file_token[1]
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {self.token_file}: {exc}") from exc
        with self._lock:
            self._file_token = (stamp, token)
        return token

    def client_certificate(self) -> tuple[bytes, bytes] | None:
        """(certificate, key) in PEM, from the kubeconfig or the exec plugin."""
        if self.exec_plugin is not None:
            issued = self.exec_plugin.credential()
            if issued.cert_pem and issued.key_pem:
                return issued.cert_pem, issued.key_pem
        if self.cert_pem and self.key_pem:
            return self.cert_pem, self.key_pem
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """TLS as the cluster entry says: its CA (else the system's), the client certificate."""
        ctx = ssl.create_default_context(
            cadata=self.ca_pem.decode("ascii", "replace") if self.ca_pem else None
        )
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        pair = self.client_certificate()
        if pair is not None:
            load_cert_chain(ctx, *pair)
        return ctx


def load_cert_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """`ssl` loads a key from a file only: a private folder, removed once it is loaded."""
    with tempfile.TemporaryDirectory(prefix="surreal-kube-tls-") as tmp:
        os.chmod(tmp, 0o700)
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        for path, data in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"the client certificate or key cannot be used: {exc}") from exc


def credentials(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
) -> Credentials:
    """The credentials kubectl would use: in a pod with no kubeconfig and no context asked for,
    the ServiceAccount's; else the kubeconfig's context (`context`, else its current one)."""
    if kubeconfig is None and context is None and in_cluster_available():
        return in_cluster()
    return from_kubeconfig(load_config(kubeconfig), context)


def in_cluster() -> Credentials:
    """The pod's ServiceAccount: token (re-read as the kubelet rotates it), CA, namespace."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST is not set")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    ca = SERVICE_ACCOUNT_DIR / "ca.crt"
    namespace = SERVICE_ACCOUNT_DIR / "namespace"
    try:
        ca_pem = ca.read_bytes()
        ns = namespace.read_text().strip() if namespace.exists() else None
    except OSError as exc:
        raise ConfigError(f"cannot read the ServiceAccount's files: {exc}") from exc
    return Credentials(
        server=f"https://{host}:{port}",
        context="in-cluster",
        in_cluster=True,
        namespace=ns,
        ca_pem=ca_pem,
        token_file=SERVICE_ACCOUNT_DIR / "token",
    )


def from_kubeconfig(config: KubeConfig, context: str | None = None) -> Credentials:
    """The credentials of one context of a merged kubeconfig."""
    name = context or config.current
    if name is None:
        raise ContextError("kubeconfig has no current context; pass --context")
    ctx = config.contexts.get(name)
    if ctx is None:
        names = ", ".join(sorted(config.contexts)) or "none"
        if context is not None:
            raise ContextError(f"kubeconfig has no context named {context!r} (contexts: {names})")
        raise ConfigError(f"the current context {name!r} is not in the kubeconfig ({names})")
    cluster_name = ctx.get("cluster")
    if cluster_name not in config.clusters:
        raise ConfigError(f"context {name!r}: no cluster named {cluster_name!r} in the kubeconfig")
    cluster, cluster_base = config.clusters[cluster_name]
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"cluster {cluster_name!r}: no server address")
    user: dict[str, Any] = {}
    user_base = cluster_base
    if ctx.get("user"):
        if ctx["user"] not in config.users:
            raise ConfigError(f"context {name!r}: no user named {ctx['user']!r} in the kubeconfig")
        user, user_base = config.users[ctx["user"]]
    creds = Credentials(
        server=server,
        context=name,
        namespace=ctx.get("namespace") or None,
        ca_pem=_file_or_data(cluster, "certificate-authority", cluster_base, b64=True),
        verify=not bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
    )
    if user.get("auth-provider"):
        return _from_official_loader(config, name, creds)
    if user.get("token") or user.get("tokenFile"):
        if user.get("tokenFile"):
            creds.token_file = _path(user["tokenFile"], user_base)
        else:
            creds.token = str(user["token"])
    elif user.get("exec"):
        creds.exec_plugin = ExecPlugin.from_config(user["exec"], cluster, user_base)
    elif user.get("username") and user.get("password"):
        creds.basic = (str(user["username"]), str(user["password"]))
    creds.cert_pem = _file_or_data(user, "client-certificate", user_base, b64=True)
    creds.key_pem = _file_or_data(user, "client-key", user_base, b64=True)
    if bool(creds.cert_pem) != bool(creds.key_pem):
        raise ConfigError(f"user {ctx.get('user')!r}: a client certificate needs its key too")
    return creds


def _path(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _file_or_data(entry: Mapping[str, Any], key: str, base: Path, *, b64: bool) -> bytes | None:
    """`key-data` (base64) wins over `key` (a file path)."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(data) if b64 else str(data).encode()
        except ValueError as exc:
            raise ConfigError(f"{key}-data: not base64: {exc}") from exc
    path = entry.get(key)
    if path:
        file = _path(str(path), base)
        try:
            return file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{key}: cannot read {file}: {exc}") from exc
    return None


def _from_official_loader(config: KubeConfig, context: str, creds: Credentials) -> Credentials:
    """A legacy `auth-provider` user (oidc, gcp): the official client's loader, once."""
    from kubernetes import client
    from kubernetes import config as official
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    files = os.pathsep.join(str(p) for p in config.sources)
    try:
        official.load_kube_config(
            config_file=files, context=context, client_configuration=cfg, persist_config=False
        )
        if cfg.refresh_api_key_hook is not None:
            cfg.refresh_api_key_hook(cfg)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"context {context!r}: its auth-provider failed: {exc}") from exc
    token = (cfg.api_key or {}).get("BearerToken") or (cfg.api_key or {}).get("authorization")
    if token:
        creds.token = token.split(" ", 1)[-1]
    for attr, target in (("cert_file", "cert_pem"), ("key_file", "key_pem")):
        path = getattr(cfg, attr, None)
        if path:
            setattr(creds, target, Path(path).read_bytes())
    return creds


# --------------------------------------------------------------------------- exec plugins


@dataclass
class Issued:
    """What an exec plugin returned."""

    token: str | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    expires: dt.datetime | None = None


@dataclass
class ExecPlugin:
    """A kubeconfig `exec` credential plugin (gke-gcloud-auth-plugin, aws eks get-token,
    kubelogin...): run when first needed, again when what it issued expires or is refused."""

    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    cwd: Path
    interactive_mode: str = "IfAvailable"
    cluster_info: dict[str, Any] | None = None
    _issued: Issued | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_config(
        cls, spec: Mapping[str, Any], cluster: Mapping[str, Any], base: Path
    ) -> ExecPlugin:
        if not spec.get("command"):
            raise ConfigError("user exec: no command")
        version = str(spec.get("apiVersion") or "")
        if version not in EXEC_API_VERSIONS:
            raise ConfigError(
                f"user exec: apiVersion {version!r} is not supported "
                f"(supported: {', '.join(EXEC_API_VERSIONS)})"
            )
        info = None
        if spec.get("provideClusterInfo"):
            info = {
                k: v
                for k, v in {
                    "server": cluster.get("server"),
                    "tls-server-name": cluster.get("tls-server-name"),
                    "insecure-skip-tls-verify": cluster.get("insecure-skip-tls-verify"),
                    "certificate-authority-data": cluster.get("certificate-authority-data"),
                    "proxy-url": cluster.get("proxy-url"),
                }.items()
                if v
            }
            for ext in cluster.get("extensions") or []:
                if ext.get("name") == "client.authentication.k8s.io/exec":
                    info["config"] = ext.get("extension")
        return cls(
            command=str(spec["command"]),
            args=[str(a) for a in spec.get("args") or []],
            env={str(e["name"]): str(e["value"]) for e in spec.get("env") or []},
            api_version=version,
            cwd=base,
            interactive_mode=str(spec.get("interactiveMode") or "IfAvailable"),
            cluster_info=info,
        )

    def expire(self) -> None:
        with self._lock:
            self._issued = None

    def credential(self) -> Issued:
        with self._lock:
            issued = self._issued
            now = dt.datetime.now(dt.UTC)
            if issued is None or (issued.expires is not None and issued.expires <= now):
                issued = self._issued = self._run()
            return issued

    def _run(self) -> Issued:
        interactive = self.interactive_mode != "Never" and sys.stdin.isatty()
        if self.interactive_mode == "Always" and not interactive:
            raise ConfigError(
                f"exec plugin {self.command}: it needs a terminal (interactiveMode Always)"
            )
        request: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": interactive},
        }
        if self.cluster_info is not None:
            request["spec"]["cluster"] = self.cluster_info
        command = self.command
        if os.sep in command and not Path(command).is_absolute():
            command = str(self.cwd / command)
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(request)}
        try:
            done = subprocess.run(
                [command, *self.args],
                env=env,
                cwd=self.cwd if self.cwd.is_dir() else None,
                stdin=None if interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None if interactive else subprocess.PIPE,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"exec plugin {self.command}: {exc}") from exc
        if done.returncode != 0:
            said = (done.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            tail = f": {said[-1]}" if said else ""
            raise ConfigError(f"exec plugin {self.command} exited {done.returncode}{tail}")
        return self._parse(done.stdout)

    def _parse(self, out: bytes) -> Issued:
        try:
            doc = json.loads(out)
        except ValueError as exc:
            raise ConfigError(f"exec plugin {self.command}: its output is not JSON") from exc
        if not isinstance(doc, Mapping) or doc.get("kind") != "ExecCredential":
            raise ConfigError(f"exec plugin {self.command}: its output is not an ExecCredential")
        if doc.get("apiVersion") != self.api_version:
            raise ConfigError(
                f"exec plugin {self.command}: it answered {doc.get('apiVersion')!r}, "
                f"asked for {self.api_version!r}"
            )
        status = doc.get("status") or {}
        expires = None
        if status.get("expirationTimestamp"):
            with contextlib.suppress(ValueError):
                expires = dt.datetime.fromisoformat(
                    str(status["expirationTimestamp"]).replace("Z", "+00:00")
                )
        if status.get("token"):
            return Issued(token=str(status["token"]), expires=expires)
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if cert and key:
            return Issued(cert_pem=str(cert).encode(), key_pem=str(key).encode(), expires=expires)
        raise ConfigError(
            f"exec plugin {self.command}: its credential has neither a token nor a client "
            "certificate and key"
        )
