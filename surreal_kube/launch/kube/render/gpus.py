"""How a pod's GPUs are shared out among its containers.

`spec.resources.<component>.gpu` is what one pod gets. Kubernetes hands GPUs to containers, not
pods (the device plugin exposes a container's own devices to it, renumbered from 0), and two
containers can never share one device. So the learning core's assignment helper
(`surreal_kube.rl.gpu.assign_gpus`: learner alone where possible, acting processes spread, the
rest hidden) decides per process, and its answer becomes per-container limits:

- one GPU process in the pod (the usual case: learner, an agent batch, an eval): it gets all the
  pod's GPUs and CUDA_VISIBLE_DEVICES is left to the device plugin; an agent batch spreads its
  agents over them itself;
- several GPU processes: each container gets the devices assigned to it (and any the helper left
  idle, spread evenly) as its limit and sees them as 0..n-1; processes the helper would make
  share a device are refused (a SpecError);
- the other processes (replay and ps shards, proxies) get CUDA_VISIBLE_DEVICES="" so they never
  grab GPU memory by accident;
- a pod of only such processes that asks for GPUs anyway gives them to its main process.
"""

from __future__ import annotations

from dataclasses import dataclass

from surreal_kube.errors import SpecError
from surreal_kube.experiment.topology import Group
from surreal_kube.rl.gpu import assign_gpus


@dataclass(frozen=True)
class ContainerGPUs:
    """One container's share: its `nvidia.com/gpu` limit and CUDA_VISIBLE_DEVICES (None: unset)."""

    limit: int
    visible: str | None


def container_gpus(group: Group, gpus: int) -> dict[str, ContainerGPUs]:
    """process name -> its container's GPU share, for a pod of `group` holding `gpus` GPUs."""
    names = [p.name for p in group.processes[:1]] if group.replicated else []
    names = names or [p.name for p in group.processes]
    if gpus <= 0:
        return {n: ContainerGPUs(0, None) for n in names}
    assigned = assign_gpus(gpus, [p for p in group.processes if p.name in names])
    users = [n for n in names if assigned.get(n)]
    if not users:
        users = names[:1]
        assigned = {n: ("0" if n == users[0] else "") for n in names}
    out = {n: ContainerGPUs(0, "") for n in names if n not in users}
    if len(users) == 1:
        out[users[0]] = ContainerGPUs(gpus, None)
        return {n: out[n] for n in names}
    owner: dict[str, str] = {}
    for name in users:
        ids = [i for i in assigned[name].split(",") if i]
        for i in ids:
            if i in owner:
                raise SpecError(
                    f"{group.component}: {len(users)} GPU processes share one pod but it asks for "
                    f"{gpus} nvidia.com/gpu; {owner[i]} and {name} would share GPU {i}, which "
                    f"Kubernetes cannot give to two containers: ask for at least {len(users)}"
                )
            owner[i] = name
    counts = {name: len([i for i in assigned[name].split(",") if i]) for name in users}
    for k in range(gpus - sum(counts.values())):  # devices the helper left idle: spread them
        counts[users[k % len(users)]] += 1
    for name in users:
        out[name] = ContainerGPUs(counts[name], ",".join(str(k) for k in range(counts[name])))
    return {n: out[n] for n in names}
