"""Stopping the real node leaves nothing behind, and a killed test run's node is swept by the
next start: no process, container, shim, mount, network namespace, veth, iptables rule,
listening port, cgroup, log link, CNI cache entry or work directory; kernel settings restored.

Each test starts its own control plane and node (the session's stay untouched).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import controlplane, node
from tests.cluster.controlplane import ControlPlane
from tests.node.support import real_pod, wait_for, wait_running
from tests.operator.support import ROOT
from tests.processes import spawn

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.slow]

POOLS = [{"name": "cpu-pool", "count": 1}]


def leftovers(state: dict[str, Any], container_pids: list[int]) -> list[str]:
    """Everything of the node described by state that still exists, in words."""
    slot = node.Slot(state["slot"])
    workdir = Path(state["workdir"])
    sock = str(workdir / "containerd" / "containerd.sock")
    found = []
    for p in state["procs"]:
        if controlplane._pid_runs(p["pid"], p["exe"]):
            found.append(f"process {p['name']} ({p['pid']})")
    found += [f"container process {p}" for p in container_pids if controlplane.pid_alive(p)]
    found += [f"shim {p}" for p in node._shims_of(sock.encode())]
    mountinfo = Path("/proc/self/mountinfo").read_text()
    found += [f"mount {line.split()[4]}" for line in mountinfo.splitlines() if str(workdir) in line]
    if f"/run/netns/{slot.netns}" in mountinfo or Path(f"/run/netns/{slot.netns}").exists():
        found.append(f"network namespace {slot.netns}")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    if f" {slot.host_veth}@" in links or f" {slot.host_veth}:" in links:
        found.append(f"veth {slot.host_veth}")
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    found += [f"route {r}" for r in routes.splitlines() if r.startswith(slot.pod_cidr)]
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    found += [
        f"iptables {r}"
        for r in rules.splitlines()
        if "KUBE-" in r or "CNI-" in r or slot.host_ip in r or slot.cni_network in r
    ]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        ip_hex, port_hex = fields[1].split(":")
        ip = ".".join(str(b) for b in reversed(bytes.fromhex(ip_hex)))
        if fields[3] == "0A" and ip in (slot.host_ip, slot.node_ip):
            found.append(f"listening {ip}:{int(port_hex, 16)}")
    found += [f"cgroup {d}" for d in node._cgroup_dirs(slot.cgroup_root)]
    if workdir.exists():
        found.append(f"work directory {workdir}")
    if slot.dir.exists():
        found.append(f"slot {slot.dir}")
    found += [str(p) for p in (node.CNI_CACHE / "results").glob(f"{slot.cni_network}-*")]
    if node.CONTAINER_LOG_LINKS.is_dir():
        for link in node.CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and str(workdir) in os.readlink(link):
                found.append(f"log link {link}")
    others = [d for d in node.SLOT_ROOT.glob("slot-*") if d != slot.dir]
    for key, value in state["sysctls"].items() if not others else ():
        now = (Path("/proc/sys") / key.replace(".", "/")).read_text().strip()
        if now != value:
            found.append(f"sysctl {key}={now} (was {value})")
    return found


def container_pids(state: dict[str, Any]) -> list[int]:
    pids = []
    for d in node._cgroup_dirs(node.Slot(state["slot"]).cgroup_root):
        try:
            pids += [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except OSError:
            continue
    return sorted(set(pids))


def test_stop_leaves_nothing_behind_and_is_idempotent(tmp_path: Path) -> None:
    cp = ControlPlane(pools=POOLS).start()
    try:
        rn = node.RealNode(cp).start()
        try:
            from surreal_kube.launch.kube.api.client import Kube

            kube = Kube(kubeconfig=cp.kubeconfig, namespace="default")
            kube.create(real_pod("sleeper", ["sleep", "3600"]))
            wait_running(kube, "sleeper")
            state = rn.to_state()
            pids = container_pids(state)
            assert len(pids) >= 3, pids  # CoreDNS and the sleeper, each with its pause
            assert node._shims_of(rn.containerd_address.encode())
            assert node.mounts_under(Path(state["workdir"]))
        finally:
            rn.stop()
        assert leftovers(state, pids) == []
        rn.stop()  # again: nothing to do, no error
        node.teardown(state)  # from the state alone, after the fact: the same
        assert leftovers(state, pids) == []
    finally:
        cp.stop()


SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from tests.cluster import node
    from tests.cluster.controlplane import ControlPlane
    from tests.node.support import real_pod, wait_running
    from surreal_kube.launch.kube.api.client import Kube

    cp = ControlPlane(pools=[{"name": "cpu-pool", "count": 1}]).start()
    rn = node.RealNode(cp).start()
    kube = Kube(kubeconfig=cp.kubeconfig, namespace="default")
    kube.create(real_pod("sleeper", ["sleep", "3600"]))
    wait_running(kube, "sleeper")
    print(json.dumps(rn.to_state()), flush=True)
    time.sleep(3600)
    """
)


def test_a_killed_run_leaves_containers_that_the_next_start_sweeps() -> None:
    proc = spawn(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        state = json.loads(line)
        pids = container_pids(state)
        assert pids
    finally:
        proc.send_signal(signal.SIGKILL)  # a test run killed: no teardown runs
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    # PR_SET_PDEATHSIG took the daemons, but the containers and their shims live on
    daemons = [controlplane._Proc(p["name"], p["exe"], p["pid"]) for p in state["procs"]]
    wait_for("the daemons to die with their parent", lambda: not any(
        controlplane._pid_runs(p.pid, p.exe) for p in daemons
    ), timeout=30)  # fmt: skip
    assert [p for p in pids if controlplane.pid_alive(p)], "containers died with the run"
    node.sweep()  # (or another session's new control plane already did)
    assert leftovers(state, pids) == []
