"""One process of an experiment on the cluster: which pod and container, its logs, exec into it.

Targets are said the way the local backend says them: a role or group (`learner`, `replay`,
`agents`), `ROLE/INDEX` (`agents/3`, `evals/0`), or a process name (`replay-shard-1`). A
replicated group's process lives in the pod of its ordinal (`<exp>-agents-3`, container `agents`);
a single group's processes are containers of its one pod (container `replay-shard-1`).

Logs and exec go through the API server (the kubelet behind it), never through kubectl.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.spec import Experiment
from surreal_kube.experiment.topology import Process
from surreal_kube.launch.kube import naming
from surreal_kube.launch.kube.api.client import POD, Kube, KubeError
from surreal_kube.launch.kube.status.summary import pod_phase


@dataclass(frozen=True)
class PodTarget:
    """A process's pod and container."""

    process: str
    pod: str
    container: str


def resolve_process(exp: Experiment, target: str) -> Process:
    """The process `target` names (SpecError listing the valid ones otherwise)."""
    topo = exp.topology
    names = [p.name for p in topo.processes]
    if target in names:
        return topo.process(target)
    role, _, index = target.partition("/")
    aliases = {"agent": "agents", "eval": "evals"}
    for p in topo.processes:
        named = role in (p.role, p.group) or aliases.get(role) == p.group
        if named and (not index or str(p.index) == index):
            return p
    raise SpecError(
        f"no process {target!r} in {exp.metadata.name}; valid: {', '.join(names)} "
        "(or ROLE/INDEX such as agents/0)"
    )


def find_pod(kube: Kube, exp: Experiment, namespace: str, target: str) -> PodTarget:
    """The live pod and container of `target` (LaunchError when it has no pod yet)."""
    process = resolve_process(exp, target)
    topo = exp.topology
    group = topo.group_of(process)
    name = exp.metadata.name
    if group.replicated:
        pod_name = f"{naming.object_name(name, group.name)}-{process.index}"
        pod = kube.get_or_none(POD, pod_name, namespace)
        if pod is None:
            raise LaunchError(f"{process.name} of {name} has no pod yet ({pod_name})")
        return PodTarget(process.name, pod_name, group.name)
    pods = kube.list(POD, namespace, labels=naming.selector_labels(name, group.name))
    if not pods:
        raise LaunchError(f"{process.name} of {name} has no pod yet")
    # the live pod, else the newest (a Deployment keeps failed pods next to their replacement)
    pods.sort(
        key=lambda p: (
            pod_phase(p) in ("Running", "Pending"),
            p["metadata"].get("creationTimestamp") or "",
        )
    )
    return PodTarget(process.name, pods[-1]["metadata"]["name"], process.name)


def logs(
    kube: Kube,
    namespace: str,
    target: PodTarget,
    *,
    follow: bool = False,
    previous: bool = False,
    since_seconds: int | None = None,
    tail: int | None = None,
) -> Iterator[bytes]:
    """The container's log lines as they come (with follow, until the container stops)."""
    path = POD.path(namespace, target.pod, "log")
    query = {
        "container": target.container,
        "follow": "true" if follow else None,
        "previous": "true" if previous else None,
        "sinceSeconds": since_seconds,
        "tailLines": tail,
    }
    timeout = 24 * 3600.0 if follow else 60.0
    try:
        yield from kube.stream(path, query=query, timeout=timeout, what=f"logs of {target.pod}")
    except KubeError as e:
        raise LaunchError(f"cannot read the log of {target.process} ({target.pod}): {e}") from e


@dataclass
class ExecResult:
    """What a command run in a container printed, and its exit code."""

    stdout: str
    stderr: str
    code: int
    error: str | None = None
    """Why the command could not run at all (the API server's or kubelet's words)."""


def exec_in(
    kube: Kube,
    namespace: str,
    target: PodTarget,
    command: Sequence[str],
    *,
    timeout: float = 300.0,
) -> ExecResult:
    """Run `command` in the container (no tty, no stdin) and collect its output and exit code."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import stream

    if not command:
        raise SpecError("exec needs a command after `--`, e.g. -- ls /experiment")
    core = client.CoreV1Api(kube.api)
    try:
        ws: Any = stream(
            core.connect_get_namespaced_pod_exec,
            target.pod,
            namespace,
            container=target.container,
            command=list(command),
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        ws.run_forever(timeout=timeout)
        if ws.is_open():
            ws.close()
            raise LaunchError(f"{' '.join(command)} in {target.pod} ran past {timeout:.0f}s")
        out = ws.read_stdout(timeout=0) or ""
        err = ws.read_stderr(timeout=0) or ""
        code, message = exit_status(ws.read_channel(ERROR_CHANNEL, timeout=0) or "")
        ws.close()
    except ApiException as e:
        raise LaunchError(f"cannot exec in {target.pod}/{target.container}: {e.reason}") from e
    return ExecResult(out, err, code, message)


ERROR_CHANNEL = 3
_EXIT_STATUS = re.compile(r"exit status (\d+)\s*$")


def exit_status(status_text: str) -> tuple[int, str | None]:
    """(exit code, error message) from the exec stream's status channel (a `Status` object).

    A kubelet names the code in `details.causes` (reason ExitCode); some (kwok) only say
    "... exit status N" in the message; anything else is a failure to run the command: 1.
    """
    if not status_text.strip():
        return 0, None
    try:
        status = json.loads(status_text)
    except ValueError:
        return 1, status_text.strip()
    if status.get("status") == "Success":
        return 0, None
    message = str(status.get("message") or "")
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            with contextlib.suppress(TypeError, ValueError):
                return int(cause.get("message")), None
    match = _EXIT_STATUS.search(message)
    if match:
        return int(match.group(1)), None
    return 1, message or "the command could not run"
