"""Add-ons of the test control plane: a node autoscaler and Kueue, on request.

- `Autoscaler`: Karpenter with its kwok cloud provider (tests/cluster/go/karpenter), the node
  pools GKE-shaped and scaling from 0 to a maximum. The cluster-autoscaler itself cannot be built
  here: the Go module proxy refuses `k8s.io/autoscaler/cluster-autoscaler` (README.md, Add-ons).
- `Kueue`: Kueue's manager (tests/cluster/go/kueue) with its CRDs, a ClusterQueue with CPU, memory
  and GPU quota over two ResourceFlavors (the CPU and GPU pools) and LocalQueues on request.

Both run as local processes beside the control plane, each in its own process group with its log
in the control plane's log directory, and stop with `stop()` (or die with the thread that started
them, like the control plane's own). Their binaries and CRDs come from tests/cluster/build-addons.sh.

Each acts on the whole cluster (an autoscaler adds nodes for any pending pod), so the fixtures
start them on a private control plane of their own, never on the shared `make cluster-up` one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.cluster import controlplane
from tests.cluster.controlplane import ControlPlane, ControlPlaneError

BUILD_SCRIPT = controlplane.HERE / "build-addons.sh"
GPU_RESOURCE = controlplane.GPU_RESOURCE
NODEPOOL_LABEL = controlplane.NODEPOOL_LABEL
ACCELERATOR_LABEL = controlplane.ACCELERATOR_LABEL
ZONE = "us-central1-a"
"""The zone of every autoscaled node (topology.kubernetes.io/zone), GKE-style."""


def addon_bin_dir(name: str) -> Path | None:
    """The bin directory of add-on `name` if it is built, else None."""
    probe = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--bin-dir", name], capture_output=True, text=True
    )
    if probe.returncode == 0:
        return Path(probe.stdout.strip().splitlines()[-1])
    if probe.returncode == 2:
        raise ValueError(probe.stderr.strip())
    return None


def require_addon(name: str) -> Path:
    """The bin directory of add-on `name`, or an error that says how to build it."""
    found = addon_bin_dir(name)
    if found is None:
        raise ControlPlaneError(
            f"the {name} add-on is not built: run `make cluster-addons` ({BUILD_SCRIPT})"
        )
    return found


class _Process:
    """One add-on process: its own process group, log file, and death with its parent."""

    def __init__(
        self,
        cp: ControlPlane,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        exe: str | None = None,
    ) -> None:
        """exe: what the process runs once started, when argv[0] execs it (`ip netns exec`)."""
        self.name = name
        self.log = cp.log_dir / f"{name}.log"
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cp.workdir,
                env={**os.environ, **env},
                start_new_session=True,
                preexec_fn=controlplane._die_with_parent if cp.die_with_parent else None,
            )
        self.proc = controlplane._Proc(name, exe or argv[0], self.popen.pid, self.popen)

    def exited(self) -> str | None:
        """None while it runs, else its exit code and the end of its log."""
        if self.popen.poll() is None:
            return None
        return f"{self.name} exited with code {self.popen.returncode}:\n{self.log_tail()}"

    def log_tail(self, lines: int = 25) -> str:
        return "".join(self.log.read_text(errors="replace").splitlines(True)[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        controlplane._signal_group(self.proc, signal.SIGTERM)
        if not controlplane._wait_gone(self.proc, time.monotonic() + timeout):
            controlplane._signal_group(self.proc, signal.SIGKILL)
            controlplane._wait_gone(self.proc, time.monotonic() + 5)


def _wait(what: str, proc: _Process | None, ready: Callable[[], Any], deadline: float) -> Any:
    """Poll ready() until truthy; an exited process or the deadline is an error naming `what`."""
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and (why := proc.exited()):
            raise ControlPlaneError(f"while waiting for {what}: {why}")
        try:
            last = ready()
            if last:
                return last
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.2)
    tail = f"\n{proc.name}'s log ends:\n{proc.log_tail()}" if proc is not None else ""
    raise ControlPlaneError(f"timed out waiting for {what} (last: {last!r}){tail}")


def _apply_crds(
    cp: ControlPlane,
    crd_dir: Path,
    deadline: float,
    patch: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[str]:
    """Create every CRD under crd_dir (each through `patch`, if given) and wait until each is
    Established; their names."""
    import yaml

    names = []
    for path in sorted(crd_dir.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            if patch is not None:
                crd = patch(crd)
            try:
                cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise ControlPlaneError(f"creating CRD {path.name}: {e.read()!r}") from e
            names.append(crd["metadata"]["name"])

    def established() -> bool:
        for name in names:
            crd = cp.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            conditions = (crd.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    _wait("the add-on CRDs to be Established", None, established, deadline)
    return names


def _ensure(cp: ControlPlane, path: str, body: Mapping[str, Any]) -> Any:
    """POST body to path; an object that already exists is kept (a restart of the add-on)."""
    try:
        return cp.request("POST", path, body)
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise ControlPlaneError(f"POST {path}: {e.code} {e.read()!r}") from e
        return cp.request("GET", f"{path}/{body['metadata']['name']}")


# ------------------------------------------------------------------------------ the autoscaler


@dataclasses.dataclass(frozen=True)
class ScaledPool:
    """A node pool the autoscaler grows from 0 nodes to max_nodes, shaped like a GKE pool."""

    name: str
    """Pool name: its nodes carry cloud.google.com/gke-nodepool=<name>."""
    max_nodes: int
    """The most nodes the pool may have (a Karpenter NodePool limit on CPU)."""
    instance_type: str
    """Machine type (node.kubernetes.io/instance-type), e.g. n1-standard-16."""
    cpu: int = 8
    """CPU capacity of each node."""
    memory: str = "32Gi"
    """Memory capacity of each node."""
    gpus: int = 0
    """nvidia.com/gpu capacity of each node; > 0 also adds GKE's GPU taint."""
    accelerator: str | None = None
    """cloud.google.com/gke-accelerator label value (GPU pools)."""
    pods: int = 110
    """Maximum number of pods per node."""

    def __post_init__(self) -> None:
        if self.max_nodes < 1:
            raise ValueError(f"scaled pool {self.name!r}: max_nodes must be >= 1")
        if self.gpus and not self.accelerator:
            raise ValueError(f"scaled pool {self.name!r}: a GPU pool needs an accelerator")

    def declared(self) -> dict[str, Any]:
        """The pool as a GKE user's profile declares it: at zero nodes, its maximum and the
        machine shape a new node will offer (what pre-flight cannot read from nodes)."""
        return {
            "name": self.name,
            "count": 0,
            "maxCount": self.max_nodes,
            "cpu": str(self.cpu),
            "memory": self.memory,
            "gpus": self.gpus,
            **({"accelerator": self.accelerator} if self.accelerator else {}),
        }

    def instance_type_options(self) -> dict[str, Any]:
        """This pool's machine in the kwok provider's instance-types file."""
        resources = {
            "cpu": str(self.cpu),
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": "100Gi",
        }
        if self.gpus:
            resources[GPU_RESOURCE] = str(self.gpus)
        return {
            "name": self.instance_type,
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": resources,
            "offerings": [
                {
                    "Price": 1.0,
                    "Available": True,
                    "Requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
                    ],
                }
            ],
        }

    def node_pool(self, consolidate_after: str) -> dict[str, Any]:
        """The Karpenter NodePool: GKE's labels and taint on every node, 0..max_nodes of them."""
        labels = {NODEPOOL_LABEL: self.name}
        taints = []
        if self.gpus:
            labels[ACCELERATOR_LABEL] = str(self.accelerator)
            taints.append(dict(controlplane.GPU_TAINT))
        return {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": self.name},
            "spec": {
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeClassRef": {
                            "group": "karpenter.kwok.sh",
                            "kind": "KWOKNodeClass",
                            "name": KWOK_NODE_CLASS,
                        },
                        "requirements": [
                            {
                                "key": "node.kubernetes.io/instance-type",
                                "operator": "In",
                                "values": [self.instance_type],
                            }
                        ],
                        "taints": taints,
                        "expireAfter": "Never",
                    },
                },
                # Karpenter bounds a pool by resources: max_nodes nodes' worth of CPU.
                "limits": {"cpu": str(self.cpu * self.max_nodes)},
                "disruption": {
                    "consolidationPolicy": "WhenEmpty",
                    "consolidateAfter": consolidate_after,
                    "budgets": [{"nodes": "100%"}],
                },
            },
        }


DEFAULT_SCALED_POOLS: tuple[ScaledPool, ...] = (
    ScaledPool("cpu-pool", max_nodes=4, instance_type="n2-standard-8", cpu=8, memory="32Gi"),
    ScaledPool(
        "gpu-pool",
        max_nodes=2,
        instance_type="n1-standard-16",
        cpu=16,
        memory="64Gi",
        gpus=4,
        accelerator="nvidia-tesla-t4",
    ),
)
"""The default pools' shapes (kwok/pools.yaml), each from 0 nodes."""

KWOK_NODE_CLASS = "default"


class Autoscaler:
    """Karpenter's kwok provider against `cp`: it adds kwok nodes for pending pods and removes
    empty ones (kwok then keeps them Ready and runs their pods, as for the static pools).

    batch_idle / batch_max: how long Karpenter gathers pending pods before it provisions
    (its --batch-idle-duration / --batch-max-duration; 10 s / 1 s by default, 1 s / 2 s here).
    consolidate_after: how long a node stays empty before it is removed (the pool's
    disruption.consolidateAfter). Karpenter's disruption loop runs every 10 s (fixed).
    """

    def __init__(
        self,
        cp: ControlPlane,
        pools: Sequence[ScaledPool] = DEFAULT_SCALED_POOLS,
        consolidate_after: str = "5s",
        batch_idle: str = "1s",
        batch_max: str = "2s",
        bin_dir: Path | None = None,
    ) -> None:
        names = [p.name for p in pools]
        if not pools or len(names) != len(set(names)):
            raise ValueError(f"scaled pools must be one or more with distinct names: {names}")
        self.cp = cp
        self.pools = tuple(pools)
        self.consolidate_after = consolidate_after
        self.batch = (batch_idle, batch_max)
        self.bin_dir = bin_dir or require_addon("karpenter")
        self.process: _Process | None = None
        self.health_port: int | None = None

    def start(self, timeout: float = 120.0) -> Autoscaler:
        deadline = time.monotonic() + timeout
        cp = self.cp
        _apply_crds(cp, self.bin_dir / "crds", deadline)
        node_class = {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": KWOK_NODE_CLASS},
        }
        classes = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
        created = _ensure(cp, classes, node_class)
        # The kwok provider has no controller of its own for its node class: it is Ready as
        # soon as it exists (what Karpenter's own kwok tests write, too).
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        created["status"] = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "message": "",
                    "lastTransitionTime": now,
                    "observedGeneration": created["metadata"].get("generation", 1),
                }
            ]
        }
        cp.request("PUT", f"{classes}/{KWOK_NODE_CLASS}/status", created)
        types_file = cp.workdir / "karpenter-instance-types.json"
        types_file.write_text(json.dumps([p.instance_type_options() for p in self.pools]))
        self.health_port = controlplane.free_port()
        argv = [
            str(self.bin_dir / "karpenter"),
            f"--instance-types-file-path={types_file}",
            "--disable-leader-election=true",
            f"--metrics-port={controlplane.free_port()}",
            f"--health-probe-port={self.health_port}",
            f"--batch-idle-duration={self.batch[0]}",
            f"--batch-max-duration={self.batch[1]}",
            "--log-level=debug",
        ]
        self.process = _Process(
            cp,
            "karpenter",
            argv,
            {"KUBECONFIG": str(cp.kubeconfig), "SYSTEM_NAMESPACE": "kube-system"},
        )
        try:
            _wait("karpenter /readyz", self.process, self._ready, deadline)
            for pool in self.pools:
                _ensure(
                    cp, "/apis/karpenter.sh/v1/nodepools", pool.node_pool(self.consolidate_after)
                )
            _wait("every NodePool Ready", self.process, self._pools_ready, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop Karpenter; the nodes it made stay (the control plane's stop removes them)."""
        if self.process is not None:
            self.process.stop()
            self.process = None

    def _ready(self) -> bool:
        return controlplane._http_get(f"http://127.0.0.1:{self.health_port}/readyz") == b"ok"

    def _pools_ready(self) -> bool:
        items = self.cp.request("GET", "/apis/karpenter.sh/v1/nodepools")["items"]
        ready = {
            p["metadata"]["name"]
            for p in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
        }
        return {p.name for p in self.pools} <= ready

    def pool_nodes(self, pool: str) -> list[str]:
        """Names of the nodes of `pool` now (the autoscaler's, registered or not)."""
        path = f"/api/v1/nodes?labelSelector={NODEPOOL_LABEL}%3D{pool}"
        return sorted(n["metadata"]["name"] for n in self.cp.request("GET", path)["items"])


# ------------------------------------------------------------------------------------- Kueue

KUEUE_NAMESPACE = "kueue-system"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
"""The label that submits a Job to a LocalQueue (kueue's own)."""


@dataclasses.dataclass(frozen=True)
class Quota:
    """The ClusterQueue's nominal quota: CPU and memory on the CPU flavor, and the GPU flavor's
    CPU, memory and nvidia.com/gpu."""

    cpu: str = "32"
    memory: str = "128Gi"
    gpu_cpu: str = "32"
    gpu_memory: str = "128Gi"
    gpus: int = 8


class Kueue:
    """Kueue's manager against `cp`, with one ClusterQueue (`cluster_queue`) over two
    ResourceFlavors: `cpu-pool` and `gpu-pool`, which place admitted pods on those pools
    (their gke-nodepool label; the GPU flavor tolerates GKE's GPU taint).

    It runs as its Deployment would, webhooks included, so a plain Job with the queue-name label
    is suspended at create by Kueue's webhook and started once admitted. Three stand-ins make
    that work on loopback (tests/cluster/README.md, Add-ons):

    - The webhook Service `kueue-webhook-service` is of type ExternalName, 127.0.0.1: the API
      server resolves a webhook's Service reference to `<externalName>:<port>` and still checks
      the certificate against `<service>.<namespace>.svc`, the name Kueue's rotator signs.
    - The rotator (internal certificate management, Kueue's default) writes its CA and serving
      certificate into a Secret; `start` copies them into the webhook's certDir, as the
      kubelet's Secret volume would. (With internal certificates off, Kueue reads the metrics
      certificate from the fixed /etc/kueue/metrics/certs, a path outside the test's directory.)
    - The CRDs get the conversion-webhook stanza of Kueue's kustomize patches and the webhook
      configurations are those of the module (webhook/manifests.yaml), kept to the webhooks of
      Kueue's own kinds and the enabled integration (batch/job); the rotator injects its CA into
      all of them before Kueue reports ready.
    """

    cluster_queue = "cluster-queue"
    service = "kueue-webhook-service"
    secret = "kueue-webhook-server-cert"
    integrations = ("batch/job",)
    webhook_groups = frozenset({"kueue.x-k8s.io", "batch"})
    """API groups whose webhooks are registered: Kueue's own and the batch/job integration's
    (a disabled integration's webhook path is not served, and its failurePolicy is Fail)."""
    converted_crds = (
        "localqueues.kueue.x-k8s.io",
        "clusterqueues.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
        "cohorts.kueue.x-k8s.io",
        "multikueueclusters.kueue.x-k8s.io",
    )
    """The CRDs whose conversion webhook Kueue's rotator injects (pkg/util/cert, v0.17)."""

    def __init__(self, cp: ControlPlane, quota: Quota = Quota(), bin_dir: Path | None = None):
        self.cp = cp
        self.quota = quota
        self.bin_dir = bin_dir or require_addon("kueue")
        self.process: _Process | None = None
        self.health_port: int | None = None
        self.webhook_port: int | None = None
        self.cert_dir = cp.workdir / "kueue-certs"
        self.startup_seconds: float | None = None
        """From the process's start to its /readyz answering ok (certificates made, CA
        injected, webhook server listening)."""

    def start(self, timeout: float = 120.0) -> Kueue:
        deadline = time.monotonic() + timeout
        cp = self.cp
        manifests = self.bin_dir / "webhook" / "manifests.yaml"
        if not manifests.is_file():
            raise ControlPlaneError(
                f"{manifests} is missing: run `{BUILD_SCRIPT} kueue` (it copies it, no rebuild)"
            )
        self.webhook_port = controlplane.free_port()
        _apply_crds(cp, self.bin_dir / "crds", deadline, patch=self._with_conversion)
        _ensure(cp, "/api/v1/namespaces", {"metadata": {"name": KUEUE_NAMESPACE}})
        # Kueue's certificate rotator fills this Secret but does not create it (its manifests do).
        _ensure(
            cp,
            f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets",
            {"metadata": {"name": self.secret}},
        )
        _ensure(
            cp,
            f"/api/v1/namespaces/{KUEUE_NAMESPACE}/services",
            {
                "metadata": {"name": self.service},
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
            },
        )
        for webhook_config in self._webhook_configurations(manifests):
            kind = webhook_config["kind"].lower() + "s"
            _ensure(cp, f"/apis/admissionregistration.k8s.io/v1/{kind}", webhook_config)
        self.health_port = controlplane.free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.webhook_port,
                "certDir": str(self.cert_dir),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": self.service,
                "webhookSecretName": self.secret,
            },
            "visibilityServer": {"bindAddress": "127.0.0.1"},
            "integrations": {"frameworks": list(self.integrations)},
        }
        config_file = cp.workdir / "kueue-config.yaml"
        config_file.write_text(json.dumps(config, indent=2))
        argv = [
            str(self.bin_dir / "kueue"),
            f"--config={config_file}",
            f"--visibility-server-port={controlplane.free_port()}",
            f"--kubeconfig={cp.kubeconfig}",
        ]
        started = time.monotonic()
        self.process = _Process(cp, "kueue", argv, {"KUBECONFIG": str(cp.kubeconfig)})
        try:
            _wait("kueue /readyz", self.process, self._ready, deadline)
            self.startup_seconds = time.monotonic() - started
            self._create_queue()
            _wait("the ClusterQueue Active", self.process, self._queue_active, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop Kueue and remove its webhook configurations: their failurePolicy is Fail, so
        left behind they would refuse every Job (and Kueue object) on this control plane."""
        if self.process is not None:
            self.process.stop()
            self.process = None
            for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
                name = kind.removesuffix("webhookconfigurations")
                path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
                # already gone, or the control plane is (HTTPError is an OSError)
                with contextlib.suppress(OSError):
                    self.cp.request("DELETE", f"{path}/kueue-{name}-webhook-configuration")

    def _with_conversion(self, crd: dict[str, Any]) -> dict[str, Any]:
        """crd with the conversion webhook Kueue's kustomize patches add (webhook_in_*.yaml)."""
        if crd["metadata"]["name"] not in self.converted_crds:
            return crd
        crd = dict(crd)
        crd["spec"] = {
            **crd["spec"],
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"service": self._service_ref("/convert")},
                    "conversionReviewVersions": ["v1"],
                },
            },
        }
        return crd

    def _service_ref(self, path: str) -> dict[str, Any]:
        return {
            "namespace": KUEUE_NAMESPACE,
            "name": self.service,
            "path": path,
            "port": self.webhook_port,
        }

    def _webhook_configurations(self, manifests: Path) -> list[dict[str, Any]]:
        """The module's webhook configurations, named as its kustomization names them (the
        rotator looks them up by those names), pointed at the webhook Service's port and kept
        to the webhooks of `webhook_groups`."""
        import yaml

        configs = []
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc:
                continue
            hooks = []
            for hook in doc["webhooks"]:
                groups = {g for rule in hook.get("rules", []) for g in rule["apiGroups"]}
                if not groups or not groups <= self.webhook_groups:
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hooks.append({**hook, "clientConfig": {"service": self._service_ref(path)}})
            name = doc["metadata"]["name"]
            configs.append({**doc, "metadata": {"name": f"kueue-{name}"}, "webhooks": hooks})
        return configs

    def _mount_certs(self) -> None:
        """Copy the rotator's certificate and key from its Secret into certDir once they are
        there (what the kubelet does for the Deployment's Secret volume)."""
        import base64

        if (self.cert_dir / "tls.crt").is_file():
            return
        data = (
            self.cp.request(
                "GET", f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets/{self.secret}"
            ).get("data")
            or {}
        )
        if "tls.crt" not in data or "tls.key" not in data:
            return
        self.cert_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in ("tls.key", "tls.crt"):  # the certificate last: the rotator waits for it
            tmp = self.cert_dir / f".{name}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(data[name]))
            tmp.replace(self.cert_dir / name)

    def _ready(self) -> bool:
        self._mount_certs()
        return controlplane._http_get(f"http://127.0.0.1:{self.health_port}/readyz") == b"ok"

    def _create_queue(self) -> None:
        api = "/apis/kueue.x-k8s.io/v1beta2"
        q = self.quota
        for flavor, tolerations in (
            ("cpu-pool", []),
            ("gpu-pool", [{**controlplane.GPU_TAINT, "key": GPU_RESOURCE, "operator": "Equal"}]),
        ):
            spec: dict[str, Any] = {"nodeLabels": {NODEPOOL_LABEL: flavor}}
            if tolerations:
                spec["tolerations"] = tolerations
            _ensure(
                self.cp,
                f"{api}/resourceflavors",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ResourceFlavor",
                    "metadata": {"name": flavor},
                    "spec": spec,
                },
            )

        def res(name: str, quota: str | int) -> dict[str, str]:
            return {"name": name, "nominalQuota": str(quota)}

        cluster_queue = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": self.cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                        "flavors": [
                            # in order of preference: a CPU-only pod takes the CPU pool
                            {
                                "name": "cpu-pool",
                                "resources": [
                                    res("cpu", q.cpu),
                                    res("memory", q.memory),
                                    res(GPU_RESOURCE, 0),
                                ],
                            },
                            {
                                "name": "gpu-pool",
                                "resources": [
                                    res("cpu", q.gpu_cpu),
                                    res("memory", q.gpu_memory),
                                    res(GPU_RESOURCE, q.gpus),
                                ],
                            },
                        ],
                    }
                ],
            },
        }
        _ensure(self.cp, f"{api}/clusterqueues", cluster_queue)

    def _queue_active(self) -> bool:
        cq = self.cp.request(
            "GET", f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{self.cluster_queue}"
        )
        return any(
            c["type"] == "Active" and c["status"] == "True"
            for c in cq.get("status", {}).get("conditions", [])
        )

    def create_local_queue(self, namespace: str, name: str = "queue") -> str:
        """A LocalQueue `name` in `namespace` feeding the ClusterQueue; its name."""
        _ensure(
            self.cp,
            f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": self.cluster_queue},
            },
        )
        return name
