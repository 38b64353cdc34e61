"""A small Kubernetes client: one connection, plain dicts, server-side apply, own errors.

Everything cluster-facing in surreal-kube (the CLI verbs and the operator's reconcile step) talks to
the API server through `Kube`: credentials read as kubectl reads them (`kubeconfig.py`), one
urllib3 connection pool, plain JSON dicts, so that objects rendered by the templates go to the
server as they are, and every transport failure converted into the small hierarchy below,
chained with `raise ... from e`.

    KubeError (LaunchError)
      NotFoundError       404
      ConflictError       409 (already exists, resourceVersion or field-manager conflict)
      ForbiddenError      403 (RBAC, admission, an exceeded ResourceQuota)
      InvalidError        422 (the object breaks the schema)
      UnreachableError    no answer (connection refused, TLS, timeout)
      ServerError         anything else, with its status and reason

The official `kubernetes` package is not imported here at all (`kubeconfig.py` says why), except
by `Kube.api`, for exec and port-forward.

One module of about 750 lines on purpose: the connection, the error hierarchy, the table of
kinds and the verbs (get, list, apply, watch, delete) are one unit every caller imports whole;
credentials (kubeconfig.py), watches (watch.py) and decoding (slim.py) are already apart.
"""

from __future__ import annotations

import builtins
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from surreal_kube.errors import LaunchError

FIELD_MANAGER = "surreal-kube"
USER_AGENT = "surreal-kube"
CRD_SEEN_SECONDS = 10.0
POOL_SIZE = 16
"""Connections kept open to the API server: the applier's parallel requests and the operator's
watches (one held open each) at once; more are opened when needed and not kept."""
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


# --------------------------------------------------------------------------- errors


class KubeError(LaunchError):
    """The API server refused a request or could not be reached."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFoundError(KubeError):
    """404: the object (or its kind) does not exist."""


class ConflictError(KubeError):
    """409: it already exists, or someone changed it meanwhile."""


class ForbiddenError(KubeError):
    """403: RBAC, an admission plugin or a ResourceQuota said no."""


class InvalidError(KubeError):
    """422: the object does not satisfy its schema."""


class UnreachableError(KubeError):
    """The API server did not answer (connection, TLS or timeout)."""


class ServerError(KubeError):
    """Any other failure, with the server's status and reason."""


_BY_STATUS: dict[int, type[KubeError]] = {
    404: NotFoundError,
    409: ConflictError,
    403: ForbiddenError,
    422: InvalidError,
}


def error_from_response(status: int, body: bytes | str | None, what: str) -> KubeError:
    """The KubeError for an HTTP error answer; the server's own message when it sent one."""
    reason = ""
    message = ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        doc = {}
    if isinstance(doc, dict):
        reason = str(doc.get("reason") or "")
        message = str(doc.get("message") or "")
    if not message:
        message = text.strip()[:300] or f"HTTP {status}"
    cls = _BY_STATUS.get(status, ServerError)
    return cls(f"{what}: {message}", status=status, reason=reason)


def is_transport_error(exc: BaseException) -> bool:
    """True for a failure to reach the server (urllib3, ssl, socket), not an answer from it."""
    return type(exc).__module__.startswith(("urllib3", "ssl", "socket")) or isinstance(exc, OSError)


def unreachable_error(exc: BaseException, server: str | None = None) -> UnreachableError:
    """One kubectl-like line for a server that did not answer, whatever the transport raised.

    kubectl's words, because that is what its users search for: "The connection to the server
    HOST:PORT was refused - did you specify the right host or port?" for a refused connection,
    "Unable to connect to the server: ..." with the one cause that matters otherwise. Never
    urllib3's retry dump.
    """
    import socket
    import ssl
    from urllib.parse import urlsplit

    address = _address(exc, server)
    causes: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(causes) < 10:
        causes.append(seen)
        reason = getattr(seen, "reason", None)
        seen = reason if isinstance(reason, BaseException) else (seen.__cause__ or seen.__context__)
    names = {type(c).__name__ for c in causes}
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return UnreachableError(
            f"The connection to the server {address} was refused - "
            "did you specify the right host or port?"
        )
    host = urlsplit(server).hostname if server and "://" in server else address.split(":")[0]
    if "NameResolutionError" in names or any(isinstance(c, socket.gaierror) for c in causes):
        return UnreachableError(
            f"Unable to connect to the server: dial tcp: lookup {host}: no such host"
        )
    if any(isinstance(c, ssl.SSLError) for c in causes) or "SSLError" in names:
        tls = next(
            c for c in causes if isinstance(c, ssl.SSLError) or type(c).__name__ == "SSLError"
        )
        detail = getattr(tls, "reason", None) or str(tls)
        return UnreachableError(f"Unable to connect to the server {address}: TLS: {detail}")
    if names & {"ConnectTimeoutError", "ReadTimeoutError", "TimeoutError"} or any(
        isinstance(c, TimeoutError) for c in causes
    ):
        return UnreachableError(f"Unable to connect to the server: dial tcp {address}: i/o timeout")
    last = causes[-1]
    detail = getattr(last, "strerror", None) or str(last).split(": ")[-1] or type(last).__name__
    return UnreachableError(f"Unable to connect to the server {address}: {detail}")


def _address(exc: BaseException, server: str | None) -> str:
    """`host:port` of the server: from urllib3's pool when it says, else the configured URL."""
    from urllib.parse import urlsplit

    seen: BaseException | None = exc
    while seen is not None:
        # urllib3's connection (NewConnectionError) or pool (MaxRetryError, ReadTimeoutError)
        where = vars(seen).get("conn") or vars(seen).get("pool")
        if where is not None and getattr(where, "host", None):
            return f"{where.host}:{where.port}" if where.port else str(where.host)
        seen = seen.__cause__ or seen.__context__
    if server:
        parts = urlsplit(server if "://" in server else f"https://{server}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{parts.hostname}:{port}"
    return "the API server"


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: its group/version, plural and scope."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def path(
        self, namespace: str | None = None, name: str | None = None, sub: str | None = None
    ) -> str:
        """The REST path of the collection, or of one object (and a subresource)."""
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


_KNOWN = (
    Resource("v1", "Namespace", "namespaces", namespaced=False),
    Resource("v1", "Node", "nodes", namespaced=False),
    Resource("v1", "Pod", "pods"),
    Resource("v1", "Service", "services"),
    Resource("v1", "ConfigMap", "configmaps"),
    Resource("v1", "Secret", "secrets"),
    Resource("v1", "ServiceAccount", "serviceaccounts"),
    Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    Resource("v1", "Event", "events"),
    Resource("v1", "ResourceQuota", "resourcequotas"),
    Resource("apps/v1", "StatefulSet", "statefulsets"),
    Resource("apps/v1", "Deployment", "deployments"),
    Resource("apps/v1", "ReplicaSet", "replicasets"),
    Resource("batch/v1", "Job", "jobs"),
    Resource("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    Resource("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    Resource("discovery.k8s.io/v1", "EndpointSlice", "endpointslices"),
    Resource("coordination.k8s.io/v1", "Lease", "leases"),
    Resource("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", namespaced=False),
    Resource("rbac.authorization.k8s.io/v1", "Role", "roles"),
    Resource("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    Resource("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False),
    Resource("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
    Resource(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
    ),
    Resource("surreal.ai/v1alpha1", "Experiment", "experiments"),
)
RESOURCES: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in _KNOWN}


def resource(api_version: str, kind: str) -> Resource:
    """The Resource of a built-in kind this package uses (KeyError for others)."""
    return RESOURCES[(api_version, kind)]


POD = resource("v1", "Pod")
EVENT = resource("v1", "Event")
NODE = resource("v1", "Node")
EXPERIMENT = resource("surreal.ai/v1alpha1", "Experiment")
CONFIG_MAP = resource("v1", "ConfigMap")
CRD = resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")


def describe(obj: Mapping[str, Any]) -> str:
    """`StatefulSet/exp-agents` for messages."""
    return f"{obj.get('kind', '?')}/{obj.get('metadata', {}).get('name', '?')}"


# --------------------------------------------------------------------------- the connection


class Kube:
    """One connection to one cluster, with a default namespace (kubectl's rules).

    The namespace is the `namespace` argument, else the kubeconfig context's namespace, else
    `default`; in a pod (no kubeconfig, KUBERNETES_SERVICE_HOST set) the service account's.
    """

    def __init__(
        self,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        namespace: str | None = None,
        field_manager: str = FIELD_MANAGER,
        timeout: float = 30.0,
    ) -> None:
        from surreal_kube.launch.kube.api import kubeconfig as config

        self.field_manager = field_manager
        self.timeout = timeout
        self._kubeconfig = kubeconfig
        try:
            creds = config.credentials(kubeconfig, context)
        except config.ContextError as e:
            raise KubeError(str(e)) from e
        except config.ConfigError as e:
            raise load_error(kubeconfig, e) from e
        self.credentials = creds
        self.context = creds.context
        self.namespace = namespace or creds.namespace or "default"
        self.server = creds.server
        self._pool: Any = None
        self._pool_lock = threading.Lock()
        self._official: Any = None
        self._crd_seen = -CRD_SEEN_SECONDS
        self._discovered: dict[tuple[str, str], Resource] = {}

    # -- plumbing

    def close(self) -> None:
        if self._pool is not None:
            self._pool.clear()
        if self._official is not None:
            self._official.close()

    def _connections(self) -> Any:
        """urllib3's pool for this server, made at the first request (threads share it)."""
        with self._pool_lock:
            if self._pool is None:
                import urllib3

                creds = self.credentials
                options: dict[str, Any] = {
                    "maxsize": POOL_SIZE,
                    "block": False,
                    "ssl_context": creds.ssl_context(),
                }
                if creds.tls_server_name:
                    options["server_hostname"] = creds.tls_server_name
                if not creds.verify:
                    options["assert_hostname"] = False
                    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
                if creds.proxy:
                    self._pool = urllib3.ProxyManager(creds.proxy, **options)
                else:
                    self._pool = urllib3.PoolManager(**options)
            return self._pool

    @property
    def api(self) -> Any:
        """The official client's ApiClient for the same cluster and identity, for what needs
        its websocket streams (exec, port-forward); loaded at the first use only."""
        if self._official is None:
            self._official = official_api_client(
                self._kubeconfig, None if self.credentials.in_cluster else self.context
            )
        return self._official

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def raw(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
        what: str | None = None,
        accept: str | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Any:
        """One request; the parsed JSON answer (or text), KubeError on any failure.

        accept: the Accept header (default JSON), e.g. `METADATA_LIST` for names and labels only.
        decode: parses the answer instead of `json.loads` (`slim.pod_list`: slim pods).
        """
        resp = self._send(
            method, path, query, body, content_type, timeout, what, stream=False, accept=accept
        )
        data = resp.data
        if not data:
            return None
        try:
            return (decode or json.loads)(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    def stream(
        self,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        what: str | None = None,
        accept: str | None = None,
    ) -> Iterator[bytes]:
        """GET a streaming answer (logs, watches) and yield its lines as they arrive."""
        resp = self._send("GET", path, query, None, None, timeout, what, stream=True, accept=accept)
        buffer = b""
        try:
            for chunk in resp.stream(4096, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    yield line + b"\n"
            if buffer:
                yield buffer
        except Exception as e:  # urllib3's protocol and timeout errors mid-stream
            if type(e).__module__.startswith("urllib3"):
                raise UnreachableError(f"{what or path}: the stream broke: {e}") from e
            raise
        finally:
            resp.release_conn()

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeout: float | None,
        what: str | None,
        *,
        stream: bool,
        accept: str | None = None,
    ) -> Any:
        import urllib3

        from surreal_kube.launch.kube.api.kubeconfig import ConfigError

        headers = {"Accept": accept or "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        url = self.server + path + (f"?{urlencode(params)}" if params else "")
        label = what or f"{method} {path}"
        limit = timeout if timeout is not None else self.timeout
        for attempt in (1, 2):
            try:
                auth = self.credentials.authorization()
                if auth:
                    headers["Authorization"] = auth
                resp = self._connections().request(
                    method,
                    url,
                    body=data,
                    headers=headers,
                    timeout=urllib3.Timeout(connect=min(limit, 10.0), read=limit),
                    retries=False,
                    redirect=False,
                    preload_content=not stream,
                )
            except ConfigError as e:
                raise KubeError(f"{label}: {e}") from e
            except Exception as e:
                if is_transport_error(e):
                    raise unreachable_error(e, self.server) from e
                raise
            if resp.status == 401 and attempt == 1 and self.credentials.unauthorized():
                resp.drain_conn()
                resp.release_conn()
                continue  # a fresh token or exec credential, once
            break
        if not 200 <= resp.status <= 299:
            raise error_from_response(resp.status, resp.data, label)
        return resp

    # -- discovery

    def resource_for(self, api_version: str, kind: str) -> Resource:
        """The Resource of any kind: the built-in table, else API discovery (cached)."""
        key = (api_version, kind)
        if key in RESOURCES:
            return RESOURCES[key]
        if key not in self._discovered:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            found = self.raw("GET", base, what=f"discover {api_version}")
            for r in found.get("resources", []):
                if "/" not in r["name"]:
                    self._discovered[(api_version, r["kind"])] = Resource(
                        api_version, r["kind"], r["name"], bool(r.get("namespaced"))
                    )
            if key not in self._discovered:
                raise NotFoundError(f"the server has no kind {kind} in {api_version}", 404)
        return self._discovered[key]

    def has_experiment_crd(self) -> bool:
        """True when the `Experiment` kind is served (the CRD is installed and established).

        A yes is kept for CRD_SEEN_SECONDS: one command asks several times (pre-flight, the
        check for an existing experiment, the kept-claim check), each a round trip."""
        if time.monotonic() - self._crd_seen < CRD_SEEN_SECONDS:
            return True
        try:
            found = self.raw("GET", f"/apis/{EXPERIMENT.api_version}", what="discover Experiment")
        except NotFoundError:
            return False
        served = any(r.get("name") == EXPERIMENT.plural for r in (found or {}).get("resources", []))
        if served:
            self._crd_seen = time.monotonic()
        return served

    # -- objects

    def _ns(self, res: Resource, namespace: str | None) -> str | None:
        return (namespace or self.namespace) if res.namespaced else None

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        ns = self._ns(res, namespace)
        return self.raw("GET", res.path(ns, name), what=f"get {res.kind}/{name}")

    def get_or_none(
        self, res: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return self.get(res, name, namespace)
        except NotFoundError:
            return None

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        labels: str | Mapping[str, str] | None = None,
        fields: str | None = None,
        all_namespaces: bool = False,
        decode: Callable[[bytes], Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of a kind (in the namespace), paging through large lists.

        decode: parses each page (`slim.pod_list`, `slim.node_list`: the part we read)."""
        ns = None if all_namespaces else self._ns(res, namespace)
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {
            "labelSelector": selector(labels) if labels else None,
            "fieldSelector": fields,
            "limit": 500,
        }
        while True:
            page = self.raw(
                "GET", res.path(ns), query=query, what=f"list {res.plural}", decode=decode
            )
            for item in page.get("items", []):
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items
            query["continue"] = cont

    def create(
        self, obj: Mapping[str, Any], namespace: str | None = None, *, dry_run: bool = False
    ) -> dict[str, Any]:
        res = self.resource_for(obj["apiVersion"], obj["kind"])
        ns = self._ns(res, namespace or obj.get("metadata", {}).get("namespace"))
        return self.raw(
            "POST",
            res.path(ns),
            query={
                "dryRun": "All" if dry_run else None,
                "fieldManager": self.field_manager,
                "fieldValidation": "Strict",
            },
            body=dict(obj),
            what=f"create {describe(obj)}",
        )

    def apply(
        self,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
        force: bool = True,
        sub: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply `obj` under this client's field manager; the object as stored."""
        res = self.resource_for(obj["apiVersion"], obj["kind"])
        meta = obj.get("metadata") or {}
        ns = self._ns(res, namespace or meta.get("namespace"))
        return self.raw(
            "PATCH",
            res.path(ns, meta["name"], sub),
            query={
                "fieldManager": self.field_manager,
                "force": "true" if force else None,
                "dryRun": "All" if dry_run else None,
                "fieldValidation": "Strict",
            },
            body=dict(obj),
            content_type=APPLY_PATCH,
            what=f"apply {describe(obj)}",
        )

    def patch(
        self,
        res: Resource,
        name: str,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        sub: str | None = None,
    ) -> dict[str, Any]:
        """A JSON merge patch (small edits: an annotation, the scale subresource)."""
        ns = self._ns(res, namespace)
        return self.raw(
            "PATCH",
            res.path(ns, name, sub),
            query={"fieldManager": self.field_manager},
            body=dict(body),
            content_type=MERGE_PATCH,
            what=f"patch {res.kind}/{name}",
        )

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        missing_ok: bool = True,
        dry_run: bool = False,
    ) -> bool:
        """Delete one object; False when it was already gone (and missing_ok)."""
        ns = self._ns(res, namespace)
        try:
            self.raw(
                "DELETE",
                res.path(ns, name),
                query={"dryRun": "All" if dry_run else None},
                body={"propagationPolicy": propagation},
                what=f"delete {res.kind}/{name}",
            )
        except NotFoundError:
            if missing_ok:
                return False
            raise
        return True

    def delete_collection(
        self, res: Resource, labels: str | Mapping[str, str], namespace: str | None = None
    ) -> None:
        """Delete every object of a kind matching the labels."""
        ns = self._ns(res, namespace)
        self.raw(
            "DELETE",
            res.path(ns),
            query={"labelSelector": selector(labels)},
            body={"propagationPolicy": "Background"},
            what=f"delete {res.plural}",
        )

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        labels: str | Mapping[str, str] | None = None,
        resource_version: str | None = None,
        timeout: float = 60.0,
        all_namespaces: bool = False,
        metadata_only: bool = False,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) events until the server ends the watch (about `timeout` seconds).

        An ERROR event (410 Gone: `resource_version` is too old to resume from) is raised as the
        matching KubeError. `all_namespaces`: watch the kind in every namespace. metadata_only:
        the objects come as PartialObjectMetadata (apiVersion, kind and metadata), for a
        watcher that needs no more: the server then sends no spec or status. decode: parses
        each event line (`slim.pod_event`: the pod slim) instead of `json.loads`."""
        ns = None if all_namespaces else self._ns(res, namespace)
        query = {
            "watch": "true",
            "labelSelector": selector(labels) if labels else None,
            "resourceVersion": resource_version,
            "timeoutSeconds": int(timeout),
            "allowWatchBookmarks": "true",
        }
        for line in self.stream(
            res.path(ns),
            query=query,
            timeout=timeout + 10,
            what=f"watch {res.plural}",
            accept=METADATA if metadata_only else None,
        ):
            if not line.strip():
                continue
            event = (decode or json.loads)(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                raise error_from_response(
                    int(status.get("code") or 500), json.dumps(status), f"watch {res.plural}"
                )
            yield event["type"], event["object"]

    def wait_gone(
        self,
        res: Resource,
        labels: str | Mapping[str, str],
        namespace: str | None = None,
        *,
        timeout: float = 120.0,
    ) -> builtins.list[dict[str, Any]]:  # `list` is a method of this class here
        """Poll until no object of a kind matches; what is left when time ran out."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.list(res, namespace, labels=labels)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.3)


METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""Accept header of a watch (or get) that wants only the objects' metadata."""
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""Accept header of a list that wants only the objects' metadata."""


def selector(labels: str | Mapping[str, str]) -> str:
    """A label selector string from a mapping (or a string as is)."""
    if isinstance(labels, str):
        return labels
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_error(kubeconfig: str | os.PathLike[str] | None, exc: Exception) -> KubeError:
    """One line for configuration that cannot be loaded, naming the file it came from."""
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    return KubeError(f"cannot load the Kubernetes configuration ({where}): {exc}")


def official_api_client(kubeconfig: str | os.PathLike[str] | None, context: str | None) -> Any:
    """The official client's ApiClient for a context (None: the pod's ServiceAccount), for the
    calls that need its websocket streams (`pods.exec_in`, port-forward)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if context is None:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig else None,
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError) as e:
        raise load_error(kubeconfig, e) from e
    return client.ApiClient(cfg)
