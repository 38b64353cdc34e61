"""A real Kubernetes node beside the kwok pools: kubelet + containerd + CNI + kube-proxy + CoreDNS.

Containers really run here. The node lives in a network namespace of its own, so its bridge,
pod veths and the iptables rules of kube-proxy and the CNI plugins never touch the host's
tables, and removing the namespace removes them all:

    host (127.0.0.1: etcd, kube-apiserver, ... kwok)
      |  veth sk-node<i> 10.66.255.<4i+1>/30  (socat: this address -> the API server on loopback)
    netns sk-node-<i>: eth0 10.66.255.<4i+2>/30 (the node's InternalIP)
      |  containerd, kubelet (processes); kube-proxy (a host-network pod, iptables mode)
      |  bridge cni0 10.66.<i>.1/24
    pods 10.66.<i>.0/24: CoreDNS (Service kube-dns 10.96.0.10), test pods

Pods reach the API server through the `kubernetes` Service (10.96.0.1:443): its EndpointSlice
names the host end of the veth, where a socat forwards to the API server on loopback (the API
server itself stays on 127.0.0.1). The API server reaches the kubelet (logs, exec,
port-forward) at the node's InternalIP.

The node registers as `real-0`, labelled cloud.google.com/gke-nodepool=real-pool and tainted
REAL_NODE_TAINT so that only pods that ask for it land there (kwok leaves it alone: it manages
only nodes annotated kwok.x-k8s.io/node=fake). Up to MAX_SLOTS nodes (of different control
planes) can run on one machine: each takes a slot, which fixes its names and addresses.

Teardown (stop(), or sweep() for the leftovers of a killed run) kills every container through
the node's cgroups (kube-proxy's too), the shims, containerd, kubelet and socat, unmounts all
under the node's work directory, deletes the network namespace and veth, removes the cgroups,
the kubelet's /var/log/containers links and the CNI result cache, and restores the kernel
settings the kubelet changes. It works from the slot's state file alone, so it can run in a
later process.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.cluster import controlplane, images
from tests.cluster.controlplane import ControlPlane, ControlPlaneError, _Proc

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-node.sh"
NODE_NAME = "real-0"
NODE_POOL = "real-pool"
REAL_NODE_TAINT = {"key": "surreal-kube.dev/real-node", "value": "true", "effect": "NoSchedule"}
"""Pods that should run on the real node tolerate this taint and select NODE_POOL."""
REAL_NODE_TOLERATION = {
    "key": REAL_NODE_TAINT["key"],
    "operator": "Equal",
    "value": REAL_NODE_TAINT["value"],
    "effect": REAL_NODE_TAINT["effect"],
}
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
MAX_SLOTS = 16
SLOT_ROOT = Path("/run/surreal-kube-node")
SYSCTLS_FILE = SLOT_ROOT / "sysctls.json"
WORKDIR_PREFIX = "surreal-kube-node-"
RUNC = "/usr/sbin/runc"  # Debian's runc (Makefile DEB_PACKAGES)
# Kernel settings the kubelet sets at start (protectKernelDefaults: false); restored at stop.
KUBELET_SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # the kubelet's fixed directory of log links
CNI_CACHE = Path("/var/lib/cni")  # libcni's result cache (containerd gives it no other place)
SHIM_SOCKETS = Path("/run/containerd/s")  # containerd-shim-runc-v2's fixed socket directory
CLONE_NEWNET = 0x40000000


class NodeError(ControlPlaneError):
    """The real node could not be built, started or stopped."""


# --------------------------------------------------------------------------- binaries


def built_node_bin_dir() -> Path | None:
    """The bin directory of the node's pinned binaries if built (or overridden), else None.

    $SURREAL_KUBE_NODE_BIN, when set, names a directory to use instead.
    """
    return controlplane.bin_dir_of(BUILD_SCRIPT, "SURREAL_KUBE_NODE_BIN")


def missing_host_tools() -> list[str]:
    """Debian tools the node needs (Makefile DEB_PACKAGES) that are not installed."""
    needed = {"runc": RUNC, "iptables": "iptables", "socat": "socat", "openssl": "openssl"}
    needed["busybox-static"] = str(images.BUSYBOX)
    return [pkg for pkg, exe in needed.items() if not shutil.which(exe)]


# --------------------------------------------------------------------------- slots


@dataclasses.dataclass(frozen=True)
class Slot:
    """One node's names and addresses on this machine."""

    index: int

    @property
    def netns(self) -> str:
        return f"sk-node-{self.index}"

    @property
    def host_veth(self) -> str:
        return f"sk-node{self.index}"

    @property
    def host_ip(self) -> str:
        return f"10.66.255.{4 * self.index + 1}"

    @property
    def node_ip(self) -> str:
        return f"10.66.255.{4 * self.index + 2}"

    @property
    def pod_cidr(self) -> str:
        return f"10.66.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.66.{self.index}.1"

    @property
    def cgroup_root(self) -> str:
        return f"/surreal-kube-node-{self.index}"

    @property
    def cni_network(self) -> str:
        return f"surreal-kube-node-{self.index}"

    @property
    def dir(self) -> Path:
        return SLOT_ROOT / f"slot-{self.index}"


def _claim_slot() -> Slot:
    SLOT_ROOT.mkdir(parents=True, exist_ok=True)
    sweep()
    for i in range(MAX_SLOTS):
        slot = Slot(i)
        try:
            slot.dir.mkdir()
        except FileExistsError:
            continue
        (slot.dir / "owner.pid").write_text(str(os.getpid()))
        return slot
    raise NodeError(f"all {MAX_SLOTS} real-node slots under {SLOT_ROOT} are taken")


def sweep() -> list[int]:
    """Tear down the nodes whose owner died without stopping them (a killed test run).

    A slot is stale when its owner process is gone and none of its daemons (containerd,
    kubelet) still runs; a `make cluster-up` node outlives its owner but keeps its daemons.
    Returns the swept slot numbers.
    """
    swept = []
    if not SLOT_ROOT.is_dir():
        return swept
    for slot_dir in sorted(SLOT_ROOT.glob("slot-*")):
        try:
            index = int(slot_dir.name.split("-", 1)[1])
            owner = int((slot_dir / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if controlplane.pid_alive(owner):
            continue
        state = _read_state(slot_dir)
        daemons = [p for p in state.get("procs", []) if p["name"] in ("containerd", "kubelet")]
        if any(controlplane._pid_runs(p["pid"], p["exe"]) for p in daemons):
            continue
        teardown(state or {"slot": index})
        swept.append(index)
    return swept


def _read_state(slot_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((slot_dir / "state.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


# --------------------------------------------------------------------------- the node


class RealNode:
    """kubelet + containerd + kube-proxy in a network namespace, joined to a ControlPlane."""

    def __init__(
        self,
        cp: ControlPlane,
        bin_dir: str | os.PathLike[str] | None = None,
        name: str = NODE_NAME,
        pool: str = NODE_POOL,
        die_with_parent: bool = True,
        tainted: bool = True,
    ) -> None:
        """die_with_parent: the daemons get SIGKILL when the thread that started them exits
        (`up` turns it off); the next start's sweep() then removes what they left.
        tainted: register with REAL_NODE_TAINT (the default, beside kwok pools); an end-to-end
        cluster whose only node is this one leaves it untainted, as kind's node is."""
        self.cp = cp
        built = Path(bin_dir) if bin_dir else built_node_bin_dir()
        if built is None:
            raise NodeError(
                f"the real node's binaries are not built: run `make node` ({BUILD_SCRIPT})"
            )
        self.bin_dir = built
        self.name = name
        self.pool = pool
        self.tainted = tainted
        self.die_with_parent = die_with_parent
        self.slot: Slot | None = None
        self.workdir: Path | None = None
        self.procs: list[_Proc] = []
        self.startup_seconds: float | None = None
        self._sysctls: dict[str, str] = {}
        self._log_links_existed = CONTAINER_LOG_LINKS.exists()

    # -- what other tests use

    @property
    def containerd_address(self) -> str:
        """The containerd socket (a path: `ctr --address` takes it as is)."""
        return str(self._wd / "containerd" / "containerd.sock")

    @property
    def ctr(self) -> Path:
        """The pinned `ctr` binary that talks to this node's containerd."""
        return self.bin_dir / "ctr"

    @property
    def node_ip(self) -> str:
        return self._slot.node_ip

    @property
    def pod_cidr(self) -> str:
        return self._slot.pod_cidr

    @property
    def netns(self) -> str:
        """The node's network namespace (`ip netns exec NAME ...` reaches pods from there)."""
        return self._slot.netns

    def ctr_command(self, *args: str) -> list[str]:
        """argv for `ctr` against this node, in the kubelet's `k8s.io` namespace."""
        return [str(self.ctr), "--address", self.containerd_address, "--namespace", "k8s.io", *args]

    def import_image(self, archive: str | os.PathLike[str], timeout: float = 600.0) -> list[str]:
        """Import a docker-archive or OCI tarball (podman save, images.write_image) into the
        node's containerd, where pods find it without a pull; returns the image names."""
        path = Path(archive)
        if not path.is_file():
            raise NodeError(f"image archive {path} does not exist")
        done = subprocess.run(
            self.ctr_command("images", "import", "--local", "--platform", "linux/amd64", str(path)),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise NodeError(f"ctr images import {path} failed: {done.stderr.strip()}")
        names = []
        for line in done.stdout.splitlines():
            # "unpacking localhost/x:y (sha256:...)...done"
            if line.startswith("unpacking "):
                names.append(line.split()[1])
        return names

    def image_names(self) -> list[str]:
        """Names of the images in the node's `k8s.io` namespace."""
        out = subprocess.run(
            self.ctr_command("images", "list", "--quiet"),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.split()

    # -- lifecycle

    def start(self, timeout: float = 180.0) -> RealNode:
        """Set up the network, start the daemons, register the node and deploy CoreDNS;
        on failure tear down what started."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        self.slot = _claim_slot()
        try:
            self._record_sysctls()
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            self._save_state()
            self._setup_network()
            self._write_configs()
            self._start_socat()
            self._start_containerd(deadline)
            self._import_builtin_images()
            self._publish_apiserver_endpoint()
            _make_cgroup_root(self._slot.cgroup_root)
            self._start_kubelet()
            self._save_state()
            self._wait_node_ready(deadline)
            self._deploy_system_pods()
            self._wait_system_pods(deadline)
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        self._save_state()
        return self

    def stop(self) -> None:
        """Tear everything down (idempotent); removes the Node object if the API is up."""
        if self.slot is None:
            return
        with contextlib.suppress(Exception):
            self.cp.request("DELETE", f"/api/v1/nodes/{self.name}", timeout=5)
        teardown(self.to_state())
        self.procs = []
        self.slot = None

    def alive(self) -> bool:
        """The daemons run (the API server's view is the control plane's business)."""
        return bool(self.procs) and all(controlplane._pid_runs(p.pid, p.exe) for p in self.procs)

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state (teardown and `up`/`down` read it)

    def to_state(self) -> dict[str, Any]:
        slot = self._slot
        return {
            "slot": slot.index,
            "name": self.name,
            "pool": self.pool,
            "workdir": str(self.workdir) if self.workdir else None,
            "bin_dir": str(self.bin_dir),
            "procs": [{"name": p.name, "exe": p.exe, "pid": p.pid} for p in self.procs],
            "sysctls": self._sysctls,
            "log_links_existed": self._log_links_existed,
            "startup_seconds": self.startup_seconds,
        }

    @classmethod
    def from_state(cls, cp: ControlPlane, state: Mapping[str, Any]) -> RealNode:
        node = cls(cp, bin_dir=state["bin_dir"], name=state["name"], pool=state["pool"])
        node.slot = Slot(state["slot"])
        node.workdir = Path(state["workdir"])
        node.procs = [_Proc(p["name"], p["exe"], p["pid"]) for p in state["procs"]]
        node._sysctls = dict(state.get("sysctls", {}))
        node._log_links_existed = state.get("log_links_existed", True)
        node.startup_seconds = state.get("startup_seconds")
        return node

    def _save_state(self) -> None:
        path = self._slot.dir / "state.json"
        path.write_text(json.dumps(self.to_state(), indent=2))

    @property
    def _slot(self) -> Slot:
        if self.slot is None:
            raise NodeError("the real node is not started")
        return self.slot

    @property
    def _wd(self) -> Path:
        if self.workdir is None:
            raise NodeError("the real node is not started")
        return self.workdir

    @property
    def log_dir(self) -> Path:
        return self._wd / "logs"

    # -- start steps

    def _record_sysctls(self) -> None:
        """The machine's values before any node's kubelet changed them: the first node of
        several writes them down, the last one to stop restores them (SYSCTLS_FILE)."""
        try:
            self._sysctls = json.loads(SYSCTLS_FILE.read_text())
            return
        except (OSError, ValueError):
            pass
        for key in KUBELET_SYSCTLS:
            path = Path("/proc/sys") / key.replace(".", "/")
            with contextlib.suppress(OSError):
                self._sysctls[key] = path.read_text().strip()
        SYSCTLS_FILE.write_text(json.dumps(self._sysctls))

    def _setup_network(self) -> None:
        s = self._slot
        _run(["ip", "netns", "add", s.netns])
        _run(["ip", "link", "add", s.host_veth, "type", "veth", "peer", "name", "eth0", "netns",
              s.netns])  # fmt: skip
        _run(["ip", "addr", "add", f"{s.host_ip}/30", "dev", s.host_veth])
        _run(["ip", "link", "set", s.host_veth, "up"])
        inside = ["ip", "netns", "exec", s.netns]
        _run([*inside, "ip", "link", "set", "lo", "up"])
        _run([*inside, "ip", "addr", "add", f"{s.node_ip}/30", "dev", "eth0"])
        _run([*inside, "ip", "link", "set", "eth0", "up"])
        # The host reaches pods directly (tests, the API server's webhooks); nothing else routes.
        _run(["ip", "route", "add", s.pod_cidr, "via", s.node_ip, "dev", s.host_veth])
        for key, value in (
            ("net.ipv4.ip_forward", "1"),
            ("net.bridge.bridge-nf-call-iptables", "1"),
            ("net.bridge.bridge-nf-call-ip6tables", "1"),
        ):
            _run(["nsenter", f"--net=/run/netns/{s.netns}", "sysctl", "-qw", f"{key}={value}"])

    def _write_configs(self) -> None:
        wd, s, cp = self._wd, self._slot, self.cp
        for sub in ("logs", "containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs",
                    "volume-plugins", "images", "pki"):  # fmt: skip
            (wd / sub).mkdir(parents=True, exist_ok=True)
        # The kubelet's serving certificate, from the cluster CA, for the node's address.
        _kubelet_cert(cp.pki, wd / "pki", s.node_ip, self.name)
        # Daemons in the namespace reach the API server through the veth (socat to loopback);
        # its certificate names `kubernetes`, not this address.
        server = f"https://{s.host_ip}:{self._api_port}"
        _write_kubeconfig(cp, wd / "kubelet.kubeconfig", server)
        # kube-proxy runs as a pod (hostNetwork) and reads these through a hostPath volume
        (wd / "kube-proxy").mkdir(exist_ok=True)
        _write_kubeconfig(cp, wd / "kube-proxy" / "kubeconfig", server)
        (wd / "resolv.conf").write_text("")  # pods get only the cluster DNS, no host search list
        (wd / "containerd" / "config.toml").write_text(self._containerd_config())
        (wd / "cni" / "net.d" / "10-pods.conflist").write_text(json.dumps(self._cni_config()))
        (wd / "kubelet.yaml").write_text(json.dumps(self._kubelet_config(), indent=2))
        (wd / "kube-proxy" / "config.yaml").write_text(
            json.dumps(self._kube_proxy_config(), indent=2)
        )

    @property
    def _api_port(self) -> int:
        return self.cp.ports["apiserver"]

    def _containerd_config(self) -> str:
        wd = self._wd / "containerd"
        cni = self._wd / "cni"
        return f"""version = 3
root = "{wd / "root"}"
state = "{wd / "state"}"
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{wd / "containerd.sock"}"

[ttrpc]
  address = "{wd / "containerd.sock.ttrpc"}"

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "{wd / "opt"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{images.PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  # no CAP_SYS_RESOURCE on these machines: the kubelet's negative OOM scores cannot be set
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{self.bin_dir / "cni"}"]
    conf_dir = "{cni / "net.d"}"
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""

    def _cni_config(self) -> dict[str, Any]:
        s = self._slot
        return {
            "cniVersion": "1.0.0",
            "name": s.cni_network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": s.pod_cidr, "gateway": s.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self._wd / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def _kubelet_config(self) -> dict[str, Any]:
        wd, s = self._wd, self._slot
        pki = wd / "pki"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # these machines run cgroup v1
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": s.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.containerd_address}",
            "address": s.node_ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.cp.pki / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "tlsCertFile": str(pki / "kubelet.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "clusterDNS": [DNS_SERVICE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(wd / "resolv.conf"),
            "podLogsDir": str(wd / "pod-logs"),
            "volumePluginDir": str(wd / "volume-plugins"),
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "imageGCHighThresholdPercent": 100,  # imported images cannot be pulled back
            "imageGCLowThresholdPercent": 99,
            # The node's disk is the machine's, shared with everything else on it: a share
            # of it (1 % of 252 GB is 2.5 GB) reads the machine's own use as the node's
            # pressure and taints it. A floor in bytes still does when the disk is full.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "512Mi",
                "imagefs.available": "512Mi",
                "nodefs.inodesFree": "1%",
            },
            "maxPods": 50,
            "serializeImagePulls": False,
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "registerNode": True,
            "registerWithTaints": [REAL_NODE_TAINT] if self.tainted else [],
            "shutdownGracePeriod": "0s",
            "logging": {"verbosity": 1},
        }

    def _kube_proxy_config(self) -> dict[str, Any]:
        s = self._slot
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self._wd / "kube-proxy" / "kubeconfig")},
            "mode": "iptables",
            "clusterCIDR": s.pod_cidr,
            "hostnameOverride": self.name,
            "bindAddress": s.node_ip,
            "healthzBindAddress": f"{s.node_ip}:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # 0: leave the kernel's conntrack limits and timeouts as they are
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "iptables": {"localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "0s"},
            "nodePortAddresses": [f"{s.node_ip}/32"],
            "logging": {"verbosity": 1},
        }

    def _spawn(self, name: str, args: Sequence[str], in_netns: bool = True) -> None:
        exe = str(self.bin_dir / name) if (self.bin_dir / name).exists() else shutil.which(name)
        if exe is None:
            raise NodeError(f"{name} not found")
        netns = f"/run/netns/{self._slot.netns}" if in_netns else None
        die = self.die_with_parent

        def preexec() -> None:
            if netns is not None:
                _setns(netns)
            if die:
                controlplane._die_with_parent()

        env = dict(os.environ)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        with open(self.log_dir / f"{name}.log", "ab") as log:
            popen = subprocess.Popen(
                [exe, *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._wd,
                env=env,
                start_new_session=True,
                preexec_fn=preexec,
            )
        self.procs.append(_Proc(name, exe, popen.pid, popen))
        self._save_state()

    def _start_socat(self) -> None:
        s, port = self._slot, self._api_port
        self._spawn(
            "socat",
            [f"TCP-LISTEN:{port},bind={s.host_ip},fork,reuseaddr", f"TCP:127.0.0.1:{port}"],
            in_netns=False,
        )

    def _start_containerd(self, deadline: float) -> None:
        self._spawn("containerd", ["--config", str(self._wd / "containerd" / "config.toml")])
        self._wait(deadline, "containerd", lambda: self._ctr_ok())

    def _ctr_ok(self) -> bool:
        if not Path(self.containerd_address).exists():
            return False
        done = subprocess.run(self.ctr_command("version"), capture_output=True, timeout=10)
        return done.returncode == 0

    def _import_builtin_images(self) -> None:
        out = self._wd / "images"
        self.import_image(images.pause_image(out / "pause.tar", self.bin_dir / "pause"))
        self.import_image(images.coredns_image(out / "coredns.tar", self.bin_dir / "coredns"))
        self.import_image(images.busybox_image(out / "busybox.tar"))
        kube_proxy = images.kube_proxy_image(out / "kube-proxy.tar", self.bin_dir / "kube-proxy")
        self.import_image(kube_proxy)

    def _publish_apiserver_endpoint(self) -> None:
        """The `kubernetes` Service's endpoint: the host end of the veth (socat -> loopback).

        The API server runs with --endpoint-reconciler-type=none (loopback may not be an
        endpoint), so nobody else writes it.
        """
        s, cp, port = self._slot, self.cp, self._api_port
        labels = {
            "kubernetes.io/service-name": "kubernetes",
            "endpointslice.kubernetes.io/managed-by": "surreal-kube-test-node",
        }
        slice_ = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [s.host_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }
        _apply(cp, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", slice_)

    def _start_kubelet(self) -> None:
        wd, s = self._wd, self._slot
        self._spawn(
            "kubelet",
            [
                f"--config={wd / 'kubelet.yaml'}",
                f"--kubeconfig={wd / 'kubelet.kubeconfig'}",
                f"--root-dir={wd / 'kubelet'}",
                f"--cert-dir={wd / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={s.node_ip}",
                f"--node-labels={controlplane.NODEPOOL_LABEL}={self.pool},type=real",
            ],
        )

    def _wait_node_ready(self, deadline: float) -> None:
        def ready() -> bool:
            try:
                node = self.cp.request("GET", f"/api/v1/nodes/{self.name}")
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return False
                raise
            conditions = node.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        self._wait(deadline, f"node {self.name} Ready", ready)

    def _deploy_system_pods(self) -> None:
        """CoreDNS (Deployment) and kube-proxy (DaemonSet), as pods on this node."""
        for path, obj in coredns_manifests(self.pool):
            _apply(self.cp, path, obj)
        for path, obj in kube_proxy_manifests(self.pool, self._wd / "kube-proxy"):
            _apply(self.cp, path, obj)

    def _wait_system_pods(self, deadline: float) -> None:
        def ready(app: str) -> bool:
            pods = self.cp.request(
                "GET", f"/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3D{app}"
            )["items"]
            return any(
                c["type"] == "Ready" and c["status"] == "True"
                for p in pods
                if p["spec"].get("nodeName") == self.name
                for c in p.get("status", {}).get("conditions", [])
            )

        self._wait(deadline, "kube-proxy Ready", lambda: ready("kube-proxy"))
        self._wait(deadline, "CoreDNS Ready", lambda: ready("kube-dns"))

    def _wait(self, deadline: float, what: str, ready: Any) -> None:
        last: BaseException | None = None
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.popen is not None and proc.popen.poll() is not None:
                    raise NodeError(
                        f"{proc.name} exited with code {proc.popen.returncode} "
                        f"while waiting for {what}:\n{self.log_tail(proc.name)}"
                    )
            try:
                if ready():
                    return
            except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
                last = e
            time.sleep(0.2)
        tails = "\n".join(self.log_tail(p.name, 20) for p in self.procs)
        raise NodeError(f"timed out waiting for {what} (last error: {last!r})\n{tails}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            return f"--- {path}: missing"
        return f"--- {path} (last {len(text)} lines)\n" + "\n".join(text)


# --------------------------------------------------------------------------- CoreDNS


def coredns_manifests(pool: str = NODE_POOL) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) pairs that deploy CoreDNS as the cluster DNS on the real node.

    Only the cluster domain is served: nothing is forwarded upstream (no network but our own).
    """
    ns = "kube-system"
    labels = {"k8s-app": "kube-dns"}
    corefile = f""".:53 {{
    errors
    health {{
        lameduck 2s
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loadbalance
}}
"""
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["list", "watch"]},
    ]  # fmt: skip
    container = {
        "name": "coredns",
        "image": images.COREDNS_IMAGE,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
        ],
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 1},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "50m", "memory": "70Mi"}},
    }
    return [
        (
            f"/api/v1/namespaces/{ns}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns"}},
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "system:coredns"},
                "rules": rules,
            },
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "system:coredns"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:coredns",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "coredns"},
                "data": {"Corefile": corefile},
            },
        ),
        (
            f"/apis/apps/v1/namespaces/{ns}/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "coredns", "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": "coredns",
                            "dnsPolicy": "Default",
                            "priorityClassName": "system-cluster-critical",
                            "nodeSelector": {controlplane.NODEPOOL_LABEL: pool},
                            "tolerations": [REAL_NODE_TOLERATION],
                            "containers": [container],
                            "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                        },
                    },
                },
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kube-dns", "labels": labels},
                "spec": {
                    "clusterIP": DNS_SERVICE_IP,
                    "selector": labels,
                    "ports": [
                        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    ],
                },
            },
        ),
    ]


def kube_proxy_manifests(pool: str, config_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """kube-proxy as a DaemonSet on the real node, as kubeadm and kind run it: host network,
    privileged (it writes the node namespace's iptables), its config and kubeconfig from the
    node's work directory (a hostPath at the same path)."""
    labels = {"k8s-app": "kube-proxy"}
    container = {
        "name": "kube-proxy",
        "image": images.KUBE_PROXY_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/usr/local/bin/kube-proxy", f"--config={config_dir / 'config.yaml'}"],
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "config", "mountPath": str(config_dir), "readOnly": True}],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": 10256},
            "periodSeconds": 2,
        },
    }
    return [
        (
            "/apis/apps/v1/namespaces/kube-system/daemonsets",
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "kube-proxy", "labels": labels},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "hostNetwork": True,
                            "priorityClassName": "system-node-critical",
                            "nodeSelector": {controlplane.NODEPOOL_LABEL: pool},
                            "tolerations": [{"operator": "Exists"}],
                            "automountServiceAccountToken": False,
                            "terminationGracePeriodSeconds": 1,
                            "containers": [container],
                            "volumes": [
                                {
                                    "name": "config",
                                    "hostPath": {"path": str(config_dir), "type": "Directory"},
                                }
                            ],
                        },
                    },
                },
            },
        )
    ]


# --------------------------------------------------------------------------- teardown


def teardown(state: Mapping[str, Any]) -> None:
    """Remove everything a node left, from its state alone (idempotent, never raises for
    what is already gone). Order: stop the kubelet (no restarts), kill the containers through
    the node's cgroups, stop the shims and the other daemons, unmount, delete the namespace
    and veth, then the cgroups, links, caches and the work directory."""
    slot = Slot(int(state["slot"]))
    procs = [_Proc(p["name"], p["exe"], p["pid"]) for p in state.get("procs", [])]
    workdir = Path(state["workdir"]) if state.get("workdir") else None
    by_name = {p.name: p for p in procs}
    errors: list[str] = []

    def step(action: Any, *args: Any) -> None:
        try:
            action(*args)
        except (NodeError, OSError) as e:  # go on: remove all that can be removed
            errors.append(str(e))

    if "kubelet" in by_name:
        step(_stop_proc, by_name["kubelet"])
    step(_kill_cgroup_tree, slot.cgroup_root)
    if workdir is not None:
        step(_kill_shims, str(workdir / "containerd" / "containerd.sock"))
    for proc in reversed(procs):
        step(_stop_proc, proc)
    if workdir is not None:
        step(_unmount_under, workdir)
    with contextlib.suppress(subprocess.CalledProcessError):
        _run(["ip", "netns", "del", slot.netns], quiet=True)
    with contextlib.suppress(subprocess.CalledProcessError):
        _run(["ip", "link", "del", slot.host_veth], quiet=True)
    step(_remove_cgroup_tree, slot.cgroup_root)
    if workdir is not None:
        links_existed = state.get("log_links_existed", True)
        step(_remove_log_links, workdir / "pod-logs", not links_existed)
    for cached in (CNI_CACHE / "results").glob(f"{slot.cni_network}-*"):
        step(cached.unlink)
    step(_remove_dead_shim_sockets)
    others = [d for d in SLOT_ROOT.glob("slot-*") if d != slot.dir]
    if not others:  # the last node: put back what the first one found
        for key, value in state.get("sysctls", {}).items():
            step((Path("/proc/sys") / key.replace(".", "/")).write_text, value)
        SYSCTLS_FILE.unlink(missing_ok=True)
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)
    if errors:  # keep the slot: the next sweep tries again
        raise NodeError("teardown of the real node: " + "; ".join(errors))
    shutil.rmtree(slot.dir, ignore_errors=True)


def _stop_proc(proc: _Proc, timeout: float = 10.0) -> None:
    controlplane._signal_group(proc, signal.SIGTERM)
    if not controlplane._wait_gone(proc, time.monotonic() + timeout):
        controlplane._signal_group(proc, signal.SIGKILL)
        if not controlplane._wait_gone(proc, time.monotonic() + 5):
            raise NodeError(f"{proc.name} (pid {proc.pid}) survived SIGKILL")


def _cgroup_dirs(root: str) -> list[Path]:
    """Every directory of the cgroup subtree `root`, in every v1 hierarchy, deepest first.

    os.walk, not Path.rglob: the kubelet and runc remove container cgroups while we look, and
    rglob raises FileNotFoundError for a directory that vanished under it; os.walk skips it.
    """
    dirs: list[Path] = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / root.lstrip("/")
        if top.is_dir() and not top.is_symlink():
            for parent, children, _ in os.walk(top):
                dirs.extend(Path(parent) / c for c in children)
            dirs.append(top)
    return sorted(set(dirs), key=lambda p: len(p.parts), reverse=True)


def _kill_cgroup_tree(root: str, timeout: float = 20.0) -> None:
    """SIGKILL every process in the node's cgroups (all containers, pause included) until none
    is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = set()
        for d in _cgroup_dirs(root):
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        live = [p for p in pids if controlplane.pid_alive(p)]
        if not live:
            return
        if time.monotonic() > deadline:
            raise NodeError(f"container processes survived SIGKILL: {sorted(live)}")
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _make_cgroup_root(root: str) -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy; a new cpuset cgroup needs its
    parent's cpus and mems before a process can join it (cgroup v1)."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if not hierarchy.is_dir() or hierarchy.is_symlink():
            continue
        top = hierarchy / root.lstrip("/")
        top.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists() and not (top / name).read_text().strip():
                (top / name).write_text((hierarchy / name).read_text())


def _remove_cgroup_tree(root: str) -> None:
    for d in _cgroup_dirs(root):
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)  # a killed process may take a moment to leave


def _kill_shims(containerd_address: str) -> None:
    """SIGKILL the runc shims started by this containerd (they leave its process group) and
    wait until none runs."""
    deadline = time.monotonic() + 10
    while True:
        shims = _shims_of(containerd_address.encode())
        if not shims:
            return
        if time.monotonic() > deadline:
            raise NodeError(f"containerd shims survived SIGKILL: {shims}")
        for pid in shims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _shims_of(needle: bytes) -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        shim = bool(argv) and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv
        if shim and controlplane.pid_alive(int(proc.name)):
            found.append(int(proc.name))
    return found


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below path (this process's mount namespace), deepest first."""
    prefix = str(path).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(path) or point.startswith(prefix):
            found.append(point)
    return sorted(set(found), key=len, reverse=True)


def _unmount_under(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    MNT_DETACH = 2  # noqa: N806
    for _ in range(5):
        points = mounts_under(path)
        if not points:
            return
        for point in points:
            libc.umount2(point.encode(), MNT_DETACH)


def _remove_log_links(pod_logs: Path, remove_dir: bool) -> None:
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    prefix = str(pod_logs) + "/"
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(prefix):
                link.unlink()
    if remove_dir:
        with contextlib.suppress(OSError):
            CONTAINER_LOG_LINKS.rmdir()


def _remove_dead_shim_sockets() -> None:
    """Socket files of shims that were killed, on a host where other nodes' shims may live.

    The directory is the host's, but each node's shims run in its network namespace, and
    /proc/net/unix lists only the reader's: liveness is asked of the socket itself. A socket
    that refuses twice, a moment apart (a shim between its bind and its listen), is dead.
    """
    if not SHIM_SOCKETS.is_dir():
        return
    dead = [sock for sock in SHIM_SOCKETS.iterdir() if _refuses(sock)]
    if dead:
        time.sleep(0.2)
    for sock in dead:
        if _refuses(sock):
            with contextlib.suppress(OSError):
                sock.unlink()
    for d in (SHIM_SOCKETS, SHIM_SOCKETS.parent):
        with contextlib.suppress(OSError):
            d.rmdir()


def _refuses(path: Path) -> bool:
    """True if nothing listens on the Unix socket at path (a full backlog still counts as live)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        return True
    except OSError:  # EAGAIN (busy, alive), ENOENT (gone already), EACCES: not ours to judge
        return False
    finally:
        probe.close()
    return False


# --------------------------------------------------------------------------- helpers


def _run(argv: Sequence[str], quiet: bool = False) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        if quiet:
            raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
        raise NodeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def _setns(path: str) -> None:
    """In the child before exec: move into the network namespace at path (setns(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            os._exit(126)
    finally:
        os.close(fd)


def _apply(cp: ControlPlane, collection: str, obj: Mapping[str, Any]) -> None:
    """Create obj, or replace it if it exists (idempotent across node restarts)."""
    try:
        cp.request("POST", collection, dict(obj))
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise
        name = obj["metadata"]["name"]
        current = cp.request("GET", f"{collection}/{name}")
        body = dict(obj)
        body["metadata"] = {
            **obj["metadata"],
            "resourceVersion": current["metadata"]["resourceVersion"],
        }
        cp.request("PUT", f"{collection}/{name}", body)


def _write_kubeconfig(cp: ControlPlane, path: Path, server: str) -> None:
    config = json.loads(cp.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    cluster["server"] = server
    cluster["tls-server-name"] = "kubernetes"  # the serving certificate's name for this path
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def _kubelet_cert(ca_dir: Path, out: Path, ip: str, name: str) -> None:
    """The kubelet's serving certificate, signed by the cluster CA (the API server verifies it
    with --kubelet-certificate-authority)."""
    key, csr, crt = out / "kubelet.key", out / "kubelet.csr", out / "kubelet.crt"
    ext = out / "kubelet.ext"
    ext.write_text(
        f"subjectAltName=IP:{ip},DNS:{name}\nextendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    _run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)])
    _run(["openssl", "req", "-new", "-key", str(key), "-subj", f"/CN=system:node:{name}",
          "-out", str(csr)])  # fmt: skip
    _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_dir / "ca.crt"),
          "-CAkey", str(ca_dir / "ca.key"), "-set_serial", f"0x{os.urandom(8).hex()}",
          "-days", "30", "-extfile", str(ext), "-out", str(crt)])  # fmt: skip
    key.chmod(0o600)
