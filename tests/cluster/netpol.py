"""A real NetworkPolicy engine on the real test node: kube-router's network policy controller.

kube-router (tests/cluster/go/netpol, built by build-addons.sh) runs as a process in the node's
network namespace with only its firewall on (no routing, no service proxy: the bridge CNI and
kube-proxy keep those jobs). It watches pods, namespaces and NetworkPolicies through the API
server and programs iptables chains and ipsets in that namespace, which filter bridged traffic
between the node's pods (the node turns bridge-nf-call-iptables on).

kube-network-policies, which kind uses, is not the engine here: it hands packets to user space
with nftables' `queue` expression, and this kernel is built without it (CONFIG_NFT_QUEUE unset);
kube-router needs only iptables' set, mark, physdev and comment matches and ipset, all present.

`stop()` ends the process and then runs `kube-router --cleanup-config` in the namespace, which
removes its chains and ipsets, so a shared node goes back to enforcing nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.cluster import addons, controlplane, node

CHAIN = "KUBE-ROUTER-FORWARD"
"""A chain kube-router's firewall makes at start: once it exists, it enforces."""
HOST_TOOLS = ("ipset", "iptables")


class PolicyEngine:
    """kube-router's firewall for `real_node`'s pods."""

    def __init__(self, real_node: Any, bin_dir: Path | None = None) -> None:
        self.node = real_node
        self.bin_dir = bin_dir or addons.require_addon("kube-router")
        self.process: addons._Process | None = None

    @property
    def exe(self) -> str:
        return str(self.bin_dir / "kube-router")

    def start(self, timeout: float = 90.0) -> PolicyEngine:
        missing = [t for t in HOST_TOOLS if shutil.which(t) is None]
        if missing:
            raise controlplane.ControlPlaneError(
                f"kube-router needs {' '.join(missing)} on this machine: run `make deb`"
            )
        rn = self.node
        kubeconfig = rn.workdir / "kube-router.kubeconfig"
        node._write_kubeconfig(rn.cp, kubeconfig, f"https://{rn._slot.host_ip}:{rn._api_port}")
        argv = [
            self.exe,
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--enable-cni=false",
            f"--hostname-override={rn.name}",
            f"--kubeconfig={kubeconfig}",
            "--health-port=0",
            "--metrics-port=0",
            f"--service-cluster-ip-range={controlplane.SERVICE_CIDR}",
            "--v=2",
        ]
        self.process = addons._Process(rn.cp, "kube-router", self._in_netns(argv), {}, exe=self.exe)
        try:
            addons._wait(
                f"kube-router's {CHAIN} chain in {rn.netns}",
                self.process,
                lambda: CHAIN in self.iptables_rules(),
                time.monotonic() + timeout,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop kube-router and remove its chains and ipsets from the node's namespace."""
        if self.process is None:
            return
        self.process.stop()
        self.process = None
        subprocess.run(
            self._in_netns([self.exe, "--cleanup-config"]),
            capture_output=True,
            timeout=60,
            check=False,
        )

    def iptables_rules(self) -> str:
        """The filter table of the node's namespace (iptables-save)."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.node.netns, "iptables-save", "-t", "filter"],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def _in_netns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.node.netns, *argv]
