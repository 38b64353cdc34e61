"""A real Kubernetes control plane on loopback, for the tests.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local processes built
from their Go modules (tests/cluster/build.sh); kwok plays the kubelets of simulated node pools
(tests/cluster/kwok/pools.yaml), so that pods bound by the real scheduler reach Running. Every
process listens on 127.0.0.1 only, on ports chosen free at start, and runs in its own process
group so that stopping it leaves nothing behind.

As a library::

    cp = ControlPlane()            # default pools; ControlPlane(pools="my-pools.yaml")
    cp.start()
    ... cp.kubeconfig, cp.api_client(), cp.helm ...
    cp.stop()

From the command line (the Makefile's cluster-up / cluster-down)::

    python -m tests.cluster.controlplane up [--pools FILE]   # start, or reuse a live one
    eval "$(python -m tests.cluster.controlplane env)"       # KUBECONFIG and PATH for a shell
    python -m tests.cluster.controlplane down

`up` records the cluster in a state file (see state_dir()); the pytest fixture reuses a cluster
whose state file says it is alive.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
KWOK_DIR = HERE / "kwok"
DEFAULT_POOLS_FILE = KWOK_DIR / "pools.yaml"

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service, the first address of SERVICE_CIDR
POD_CIDR = "10.244.0.0/16"  # kwok hands out pod IPs from it
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# kwok's kubelet-side resources that kwok watches as objects (applied from kwok/crds.yaml).
KWOK_CRDS = ("Logs", "ClusterLogs", "PortForward", "ClusterPortForward", "Exec", "ClusterExec")
# Private work directories: tempdir/<prefix>XXXX, with the owning pid in owner.pid.
WORKDIR_PREFIX = "surreal-kube-cp-"
# The order processes start in; they stop in the reverse order. The provisioner
# (provisioner.py, the default StorageClass's) is Python, run by this interpreter.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "provisioner",
)
PROVISIONER_SCRIPT = HERE / "provisioner.py"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or stopped."""


# --------------------------------------------------------------------------- node pools


@dataclasses.dataclass(frozen=True)
class NodePool:
    """A set of identical simulated nodes, GKE style."""

    name: str
    """Pool name: the nodes are <name>-<i>, labelled cloud.google.com/gke-nodepool=<name>."""
    count: int
    """Number of nodes."""
    cpu: str = "8"
    """CPU capacity of each node (a Kubernetes quantity)."""
    memory: str = "32Gi"
    """Memory capacity of each node."""
    gpus: int = 0
    """nvidia.com/gpu capacity of each node; > 0 also adds GKE's GPU taint."""
    accelerator: str | None = None
    """cloud.google.com/gke-accelerator label value (GPU pools)."""
    pods: int = 110
    """Maximum number of pods per node."""
    ephemeral_storage: str = "100Gi"
    """ephemeral-storage capacity of each node."""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Extra node labels."""
    taints: Sequence[Mapping[str, str]] = ()
    """Extra taints ({key, value, effect})."""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodePool:
        d = dict(d)
        if "ephemeral-storage" in d:
            d["ephemeral_storage"] = d.pop("ephemeral-storage")
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"node pool {d.get('name')!r}: unknown keys {sorted(unknown)}")
        d["cpu"] = str(d.get("cpu", cls.cpu))
        d["labels"] = dict(d.get("labels") or {})
        d["taints"] = tuple(dict(t) for t in d.get("taints") or ())
        return cls(**d)

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]

    def node_manifests(self) -> list[dict[str, Any]]:
        capacity = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": self.ephemeral_storage,
        }
        if self.gpus:
            capacity[GPU_RESOURCE] = str(self.gpus)
        taints = [dict(t) for t in self.taints]
        if self.gpus and not any(t.get("key") == GPU_RESOURCE for t in taints):
            taints.append(dict(GPU_TAINT))
        nodes = []
        for name in self.node_names():
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                NODEPOOL_LABEL: self.name,
            }
            if self.accelerator:
                labels[ACCELERATOR_LABEL] = self.accelerator
            labels.update(self.labels)
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {
                            KWOK_NODE_ANNOTATION: "fake",
                            "node.alpha.kubernetes.io/ttl": "0",
                        },
                    },
                    "spec": {"taints": taints} if taints else {},
                    "status": {
                        "capacity": capacity,
                        "allocatable": dict(capacity),
                        # The API server reaches kwok's kubelet API (logs, port-forward) here.
                        "addresses": [
                            {"type": "InternalIP", "address": "127.0.0.1"},
                            {"type": "Hostname", "address": name},
                        ],
                    },
                }
            )
        return nodes


def load_pools(
    pools: str | os.PathLike[str] | Sequence[NodePool | Mapping[str, Any]] | None,
) -> list[NodePool]:
    """Node pools from a YAML file ({pools: [...]}), a list of NodePool or dicts, or the default."""
    if pools is None:
        pools = DEFAULT_POOLS_FILE
    if isinstance(pools, (str, os.PathLike)):
        import yaml

        data = yaml.safe_load(Path(pools).read_text())
        pools = data["pools"] if isinstance(data, dict) else data
    out = [p if isinstance(p, NodePool) else NodePool.from_dict(p) for p in pools]
    names = [n for p in out for n in p.node_names()]
    if len(names) != len(set(names)):
        raise ValueError("node pools give two nodes the same name")
    return out


def write_cri_log(
    path: str | os.PathLike[str], lines: Sequence[str], stream: str = "stdout"
) -> None:
    """Write a container log file as kwok serves it: the CRI format kubelets read.

    One record per line: <RFC3339Nano time> <stdout|stderr> F <text>. Point a kwok Logs or
    ClusterLogs object at the file to make `kubectl logs` return the lines.
    """
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
    Path(path).write_text("".join(f"{stamp} {stream} F {line}\n" for line in lines))


# --------------------------------------------------------------------------- binaries and state


def built_bin_dir() -> Path | None:
    """The bin directory of the pinned binaries if they are built (or overridden), else None.

    $SURREAL_KUBE_CONTROLPLANE_BIN, when set, names a directory to use instead.
    """
    return bin_dir_of(BUILD_SCRIPT, "SURREAL_KUBE_CONTROLPLANE_BIN")


def bin_dir_of(build_script: Path, override_var: str) -> Path | None:
    """What `build_script --bin-dir` names when its build is complete, or $override_var."""
    override = os.environ.get(override_var)
    if override:
        return Path(override)
    probe = subprocess.run(["bash", str(build_script), "--bin-dir"], capture_output=True, text=True)
    if probe.returncode == 0:
        return Path(probe.stdout.strip().splitlines()[-1])
    return None


def ensure_binaries(build: bool = True) -> Path:
    """The bin directory of the pinned binaries, building them first if needed (and allowed)."""
    built = built_bin_dir()
    if built is not None:
        return built
    if not build:
        raise ControlPlaneError(
            f"control-plane binaries are not built; run `make controlplane` ({BUILD_SCRIPT})"
        )
    print(
        "control plane: building the Kubernetes binaries (tens of minutes on a cold cache)...",
        file=sys.__stderr__,
        flush=True,
    )
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=sys.__stderr__, text=True
    )
    if done.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed with exit code {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1])


def state_dir() -> Path:
    """Where `up` keeps the shared cluster of this checkout.

    $SURREAL_KUBE_CLUSTER_DIR, else ~/.cache/surreal-kube/cluster/<checkout>-<hash of its path>,
    so that two checkouts on one machine do not share (or stop) each other's cluster.
    """
    env = os.environ.get("SURREAL_KUBE_CLUSTER_DIR")
    if env:
        return Path(env)
    import hashlib

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    checkout = HERE.parent.parent
    digest = hashlib.sha256(str(checkout).encode()).hexdigest()[:8]
    return cache / "surreal-kube" / "cluster" / f"{checkout.name}-{digest}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _pid_runs(pid: int, exe: str) -> bool:
    """True if pid is alive and still runs exe (guards against a recycled pid)."""
    if not pid_alive(pid):
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return argv0 == exe


# --------------------------------------------------------------------------- the control plane


@dataclasses.dataclass
class _Proc:
    name: str
    exe: str
    pid: int
    popen: subprocess.Popen[bytes] | None = None


class ControlPlane:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok on 127.0.0.1."""

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        pools: str | os.PathLike[str] | Sequence[NodePool | Mapping[str, Any]] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        die_with_parent: bool = True,
        extra_args: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """die_with_parent: the processes get SIGKILL when the thread that started them exits,
        so a test run that is killed leaves nothing behind (`up` turns it off).
        extra_args: component name (`kube-apiserver`, `kwok`...) -> flags added to its own (a
        benchmark's audit log, client rate limits of a large cluster)."""
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.pools = load_pools(pools)
        self.die_with_parent = die_with_parent
        self.bin_dir = Path(bin_dir) if bin_dir else ensure_binaries()
        self._own_workdir = workdir is None
        if workdir is None:
            _sweep_stale_workdirs()
            _sweep_stale_nodes()
            workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
            (Path(workdir) / "owner.pid").write_text(str(os.getpid()))
        self.workdir = Path(workdir)
        self.ports: dict[str, int] = {}
        self.procs: list[_Proc] = []
        self.started_at: float | None = None
        self.startup_seconds: float | None = None

    # -- paths

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def helm(self) -> Path:
        return self.bin_dir / "helm"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    # -- lifecycle

    def start(self, timeout: float = 90.0) -> ControlPlane:
        """Start everything and wait until nodes are Ready; on failure stop what started."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        self.started_at = time.time()
        for attempt in range(3):
            try:
                self._prepare()
                self._start_etcd(deadline)
                self._start_apiserver(deadline)
                self._apply_kwok_crds()
                self._create_storage_class()
                self._start_controllers()
                self._create_nodes()
                self._wait_ready(deadline)
                break
            except ControlPlaneError as e:
                self.stop(remove_workdir=False)
                # A port chosen free was taken by someone else before we bound it: new ports.
                if "address already in use" not in str(e) or attempt == 2:
                    raise
            except BaseException:
                self.stop(remove_workdir=False)
                raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self, remove_workdir: bool | None = None, timeout: float = 15.0) -> None:
        """Stop every process group (TERM, then KILL) and wait until they are gone.

        One at a time, clients first and etcd last: an API server whose etcd is already gone
        takes tens of seconds to shut down, one with etcd up about a second.
        """
        for proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
            if not _wait_gone(proc, time.monotonic() + timeout):
                _signal_group(proc, signal.SIGKILL)
                _wait_gone(proc, time.monotonic() + 5)
        leftover = [p.name for p in self.procs if _pid_runs(p.pid, p.exe)]
        self.procs = []
        if leftover:
            raise ControlPlaneError(f"processes survived SIGKILL: {leftover}")
        if remove_workdir is None:
            remove_workdir = self._own_workdir
        if remove_workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> bool:
        """All processes running and the API server ready."""
        if not self.procs or not all(_pid_runs(p.pid, p.exe) for p in self.procs):
            return False
        if {p.name for p in self.procs} < set(COMPONENTS):
            return False  # started by an older version (without the provisioner): not reused
        try:
            return self._get("/readyz", timeout=3) == b"ok"
        except OSError:
            return False

    # -- clients

    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient for this cluster (close it when done)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def env(self) -> dict[str, str]:
        """Environment variables that point kubectl, helm and the kubernetes client here."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        """A JSON request to the API server as the admin user (no client library needed)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self._ssl_context(), timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")

    # -- state file (for `up` / `down` and the fixture's reuse)

    def to_state(self) -> dict[str, Any]:
        return {
            "workdir": str(self.workdir),
            "bin_dir": str(self.bin_dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "ports": self.ports,
            "procs": [{"name": p.name, "exe": p.exe, "pid": p.pid} for p in self.procs],
            "pools": [dataclasses.asdict(p) for p in self.pools],
            "started_at": self.started_at,
            "startup_seconds": self.startup_seconds,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ControlPlane:
        cp = cls(workdir=state["workdir"], pools=state["pools"], bin_dir=state["bin_dir"])
        cp._own_workdir = True
        cp.ports = dict(state["ports"])
        cp.procs = [_Proc(p["name"], p["exe"], p["pid"]) for p in state["procs"]]
        cp.started_at = state.get("started_at")
        cp.startup_seconds = state.get("startup_seconds")
        return cp

    # -- internals

    def _prepare(self) -> None:
        import shutil

        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)  # from a failed attempt
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok"):
            self.ports[name] = free_port()
        subprocess.run(
            [
                str(self.binary("certgen")),
                "-dir",
                str(self.pki),
                "-ips",
                f"127.0.0.1,{SERVICE_IP}",
                "-dns",
                "localhost,kubernetes,kubernetes.default,kubernetes.default.svc,kubernetes.default.svc.cluster.local",
            ],
            check=True,
        )
        self._write_kubeconfig()

    def _write_kubeconfig(self) -> None:
        def b64(name: str) -> str:
            return base64.b64encode((self.pki / name).read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "surreal-kube-test",
                    "cluster": {"server": self.server, "certificate-authority-data": b64("ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64("admin.crt"),
                        "client-key-data": b64("admin.key"),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "surreal-kube-test",
                    "context": {"cluster": "surreal-kube-test", "user": "admin"},
                }
            ],
            "current-context": "surreal-kube-test",
        }
        # JSON is YAML: kubectl, helm, kwok and the Python client all read it.
        self.kubeconfig.write_text(json.dumps(config, indent=2))
        self.kubeconfig.chmod(0o600)

    @property
    def volumes_dir(self) -> Path:
        """Where the provisioner keeps the real node's volumes (removed with the workdir)."""
        return self.workdir / "volumes"

    def _spawn(self, name: str, args: list[str], exe: str | None = None) -> None:
        exe = exe or str(self.binary(name))
        with open(self.log_dir / f"{name}.log", "ab") as log:
            popen = subprocess.Popen(
                [exe, *args, *self.extra_args.get(name, ())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # its own process group: stop() kills the group
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        self.procs.append(_Proc(name, exe, popen.pid, popen))

    def _start_etcd(self, deadline: float) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",  # a throwaway test database: speed over durability
                "--log-level=warn",
            ],
        )
        self._wait(
            deadline,
            "etcd /health",
            lambda: b'"health":"true"' in _http_get(f"{client}/health"),
        )

    def _start_apiserver(self, deadline: float) -> None:
        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # Endpoints may not hold a loopback address, so the `kubernetes` Service gets no
                # endpoints from the API server (nothing in a kwok pod could reach it anyway).
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.ports['apiserver']}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'admin.crt'}",
                f"--kubelet-client-key={pki / 'admin.key'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
            ],
        )
        self._wait(
            deadline, "kube-apiserver /readyz", lambda: self._get("/readyz", timeout=3) == b"ok"
        )

    def _apply_kwok_crds(self) -> None:
        import yaml

        docs = [d for d in yaml.safe_load_all((KWOK_DIR / "crds.yaml").read_text()) if d]
        for crd in docs:
            self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)

    def _create_storage_class(self) -> None:
        """The default StorageClass `standard`, like kind's: RWO, WaitForFirstConsumer."""
        from tests.cluster import provisioner

        self.request("POST", "/apis/storage.k8s.io/v1/storageclasses", provisioner.storage_class())

    def _kube_args(self, port: str) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports[port]}",
            f"--cert-dir={self.workdir / (port + '-certs')}",
            "--leader-elect=false",
        ]

    def _start_controllers(self) -> None:
        pki = self.pki
        self._spawn(
            "kube-controller-manager",
            [
                *self._kube_args("controller-manager"),
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
            ],
        )
        self._spawn("kube-scheduler", self._kube_args("scheduler"))
        port = self.ports["kwok"]
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={KWOK_DIR / 'stages.yaml'}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                f"--node-port={port}",
                f"--server-address=127.0.0.1:{port}",
                f"--tls-cert-file={pki / 'kubelet.crt'}",
                f"--tls-private-key-file={pki / 'kubelet.key'}",
                f"--enable-crds={','.join(KWOK_CRDS)}",
                # renew node leases: without them the node-lifecycle controller marks every
                # node NotReady after its grace period (~50 s) and pods lose Ready for good
                "--node-lease-duration-seconds=40",
            ],
        )
        self._spawn(
            "provisioner",
            [
                str(PROVISIONER_SCRIPT),
                f"--server={self.server}",
                f"--pki={self.pki}",
                f"--root={self.volumes_dir}",
            ],
            exe=sys.executable,
        )

    def _create_nodes(self) -> None:
        for pool in self.pools:
            for node in pool.node_manifests():
                self.request("POST", "/api/v1/nodes", node)

    def _wait_ready(self, deadline: float) -> None:
        names = {n for p in self.pools for n in p.node_names()}

        def nodes_ready() -> bool:
            items = self.request("GET", "/api/v1/nodes")["items"]
            ready = {
                n["metadata"]["name"]
                for n in items
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
            }
            return names <= ready

        def default_service_account() -> bool:
            try:
                self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
                return True
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return False
                raise

        self._wait(deadline, "kwok nodes Ready", nodes_ready)
        self._wait(
            deadline, "the default ServiceAccount (controller-manager)", default_service_account
        )
        self._wait(
            deadline, "kube-scheduler /healthz", lambda: self._component_healthy("scheduler")
        )
        self._wait(
            deadline,
            "kube-controller-manager /healthz",
            lambda: self._component_healthy("controller-manager"),
        )

    def _component_healthy(self, port: str) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate
        return _http_get(f"https://127.0.0.1:{self.ports[port]}/healthz", ctx) == b"ok"

    def _wait(self, deadline: float, what: str, ready: Any) -> None:
        last: BaseException | None = None
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.popen is not None and proc.popen.poll() is not None:
                    raise ControlPlaneError(
                        f"{proc.name} exited with code {proc.popen.returncode} "
                        f"while waiting for {what}:\n{self.log_tail(proc.name)}"
                    )
            try:
                if ready():
                    return
            except (OSError, ValueError, KeyError) as e:
                last = e
            time.sleep(0.1)
        tails = "\n".join(self.log_tail(p.name, 15) for p in self.procs)
        raise ControlPlaneError(f"timed out waiting for {what} (last error: {last!r})\n{tails}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            return f"--- {path}: missing"
        return f"--- {path} (last {len(text)} lines)\n" + "\n".join(text)

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _get(self, path: str, timeout: float = 10.0) -> bytes:
        return _http_get(self.server + path, self._ssl_context(), timeout=timeout)


def _http_get(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 3.0) -> bytes:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            return resp.read()
    except urllib.error.HTTPError as e:
        return e.read()


def _sweep_stale_workdirs() -> None:
    """Remove private work directories whose owner died without stopping (a killed test run;
    its processes died with it): about 60 MB of etcd files each."""
    import shutil

    for path in Path(tempfile.gettempdir()).glob(WORKDIR_PREFIX + "*"):
        try:
            owner = int((path / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not pid_alive(owner):
            shutil.rmtree(path, ignore_errors=True)


def _sweep_stale_nodes() -> None:
    """Tear down real nodes left by killed test runs (tests/cluster/node.py sweep()), so that
    their containers do not outlive the run until the next node starts."""
    from tests.cluster import node

    if node.SLOT_ROOT.is_dir():
        try:
            node.sweep()
        except ControlPlaneError as e:  # a node that cannot be removed must not stop the tests
            print(f"control plane: {e}", file=sys.__stderr__, flush=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent thread dies (Linux prctl)."""
    import ctypes

    PR_SET_PDEATHSIG = 1  # noqa: N806
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_group(proc: _Proc, sig: int) -> None:
    if not _pid_runs(proc.pid, proc.exe):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # started with start_new_session: pgid == pid


def _wait_gone(proc: _Proc, deadline: float) -> bool:
    while True:
        if proc.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=0.05)
        if not _pid_runs(proc.pid, proc.exe) and not _group_alive(proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """True if any live (non-zombie) process is left in the process group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


# ---------------------------------------------------------------- shared cluster (up/down)


def _state_file() -> Path:
    return state_dir() / "state.json"


def load_shared() -> ControlPlane | None:
    """The cluster started by `up`, if its state file exists and it is alive."""
    path = _state_file()
    try:
        state = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    cp = ControlPlane.from_state(state)
    return cp if cp.alive() else None


@contextlib.contextmanager
def _shared_lock() -> Iterator[None]:
    import fcntl

    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def up(pools: str | None = None, real_node: bool = False) -> ControlPlane:
    """Start the shared cluster, or return the live one; real_node: with the real node
    (tests/cluster/node.py) beside the kwok pools."""
    with _shared_lock():
        cp = load_shared()
        if cp is not None and (not real_node or load_shared_node(cp) is not None):
            return cp
        _down_locked()
        cp = ControlPlane(workdir=state_dir() / "run", pools=pools, die_with_parent=False)
        cp._own_workdir = True
        import shutil

        shutil.rmtree(cp.workdir, ignore_errors=True)
        cp.start()
        state = cp.to_state()
        if real_node:
            from tests.cluster import node

            try:
                rn = node.RealNode(cp, die_with_parent=False).start()
            except BaseException:
                cp.stop()
                raise
            state["real_node"] = rn.to_state()
        _state_file().write_text(json.dumps(state, indent=2))
        return cp


def load_shared_node(cp: ControlPlane) -> Any:
    """The shared cluster's real node (a tests.cluster.node.RealNode) if it has a live one."""
    try:
        state = json.loads(_state_file().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if "real_node" not in state or state.get("workdir") != str(cp.workdir):
        return None
    from tests.cluster import node

    rn = node.RealNode.from_state(cp, state["real_node"])
    return rn if rn.alive() else None


def down() -> bool:
    """Stop the shared cluster; False if there was none."""
    with _shared_lock():
        return _down_locked()


def _down_locked() -> bool:
    path = _state_file()
    try:
        state = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    cp = ControlPlane.from_state(state)
    if "real_node" in state:
        from tests.cluster import node

        node.teardown(state["real_node"])
    cp.stop(remove_workdir=True)
    path.unlink(missing_ok=True)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.cluster.controlplane", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the shared test cluster (or reuse a live one)")
    p_up.add_argument(
        "--pools", help="node-pool YAML file (default: tests/cluster/kwok/pools.yaml)"
    )
    p_up.add_argument(
        "--real-node",
        action="store_true",
        help="also start the real node (kubelet + containerd, tests/cluster/node.py)",
    )
    sub.add_parser("down", help="stop the shared test cluster")
    sub.add_parser("env", help="print shell exports (KUBECONFIG, PATH) for the shared cluster")
    sub.add_parser("bin-dir", help="build (or reuse) the binaries and print their directory")
    args = parser.parse_args(argv)
    if args.command == "up":
        t0 = time.monotonic()
        cp = up(args.pools, real_node=args.real_node)
        took = time.monotonic() - t0
        print(
            f"control plane up at {cp.server} ({took:.1f}s); kubeconfig {cp.kubeconfig}",
            file=sys.stderr,
        )
        print(
            'use it: eval "$(make -s cluster-env)"',
            file=sys.stderr,
        )
    elif args.command == "down":
        print(
            "control plane stopped" if down() else "no control plane was running", file=sys.stderr
        )
    elif args.command == "env":
        cp = load_shared()
        if cp is None:
            print("no live control plane; run `make cluster-up`", file=sys.stderr)
            return 1
        for key, value in cp.env().items():
            print(f"export {key}={_shell_quote(value)}")
    elif args.command == "bin-dir":
        print(ensure_binaries())
    return 0


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


if __name__ == "__main__":
    sys.exit(main())
