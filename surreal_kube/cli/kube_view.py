"""What the verbs share for experiments on a cluster: kubectl-style options, views, dispatch.

A NAME verb works on a local experiment when `--local` (or `--root`) is given or a local
experiment folder of that name exists; otherwise on the current kube context, as kubectl would
(`--kubeconfig`, `--context`, `--namespace`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from surreal_kube.errors import SpecError

if TYPE_CHECKING:
    from surreal_kube.launch.kube.cluster import Target
    from surreal_kube.launch.kube.status import ExperimentStatus

Kubeconfig = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
        show_default=False,
    ),
]
Context = Annotated[
    str | None,
    typer.Option(
        "--context", help="Kubeconfig context (default: the current one).", show_default=False
    ),
]
Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Namespace (default: the context's namespace, else 'default').",
        show_default=False,
    ),
]

_PHASE_STYLE = {"Running": "green", "Pending": "yellow", "Failed": "bold red", "Succeeded": "cyan"}


def target(kubeconfig: Path | None, context: str | None, namespace: str | None) -> Target:
    from surreal_kube.launch.kube.cluster import Target

    return Target(kubeconfig=kubeconfig, context=context, namespace=namespace)


def is_local(name: str | None, local: bool, root: Path | None, *kube_flags: object) -> bool:
    """The dispatch rule of the module docstring."""
    if local or root is not None:
        return True
    if any(flag is not None for flag in kube_flags):
        return False
    if name is None:
        return False
    from surreal_kube.launch.local.folder import ExperimentFolder

    return ExperimentFolder.of(name).exists()


def kube_available() -> bool:
    """True when there is a kubeconfig to read or we run in a pod."""
    import os

    return bool(
        os.environ.get("KUBECONFIG")
        or Path("~/.kube/config").expanduser().exists()
        or os.environ.get("KUBERNETES_SERVICE_HOST")
    )


_DURATION = re.compile(r"^(\d+)([smhd])$")


def parse_since(text: str | None) -> int | None:
    """kubectl's --since: 30s, 5m, 2h, 1d -> seconds."""
    if text is None:
        return None
    match = _DURATION.match(text.strip())
    if not match:
        raise SpecError(f"--since {text!r}: expected a duration such as 30s, 5m, 2h or 1d")
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


# --------------------------------------------------------------------------- views


def phase_text(phase: str | None) -> Text:
    return Text(phase or "-", style=_PHASE_STYLE.get(phase or "", ""))


def components_table(status: ExperimentStatus) -> Table:
    """One row per component: ready/desired, restarts, why not ready."""
    table = Table(box=None, pad_edge=False)
    for col in ("COMPONENT", "READY", "RESTARTS", "WAITING FOR"):
        table.add_column(col, no_wrap=col != "WAITING FOR")
    for name, comp in status.components.items():
        first = next(iter(comp.pending.items()), None)
        why = f"{first[0]}: {first[1]}" if first else ""
        if len(comp.pending) > 1:
            why += f" (+{len(comp.pending) - 1} more)"
        style = "green" if comp.ready >= comp.desired else "yellow"
        table.add_row(
            name,
            Text(f"{comp.ready}/{comp.desired}", style=style),
            str(comp.restarts),
            why,
        )
    return table


def progress_view(name: str, status: ExperimentStatus, started: float) -> Group:
    """The live view of `create`: phase, elapsed time, components."""
    head = Text.assemble(
        (f"{name} ", "bold"),
        phase_text(status.phase),
        f"  {status.ready} pods ready  agents {status.agents}  {time.monotonic() - started:.0f}s",
    )
    return Group(head, components_table(status))


def processes_table(status: ExperimentStatus) -> Table:
    """One row per pod: phase, ready, restarts, node, reason."""
    table = Table(box=None, pad_edge=False)
    for col in ("POD", "PHASE", "READY", "RESTARTS", "NODE", "REASON"):
        table.add_column(col, no_wrap=col != "REASON")
    for proc in status.processes.values():
        table.add_row(
            proc.pod,
            phase_text(proc.phase),
            "yes" if proc.ready else "no",
            str(proc.restarts),
            proc.node or "-",
            proc.reason or "",
        )
    return table


def status_view(name: str, namespace: str, status: ExperimentStatus, via: str) -> Group:
    """`status NAME` on a cluster."""
    lines: list[Any] = [
        Text.assemble(
            (f"{name}", "bold"),
            f"  namespace {namespace}  ({via})  phase ",
            phase_text(status.phase),
        ),
        Text(f"  {status.reason or ''}"),
        Text(
            f"  pods ready {status.ready}  agents {status.agents}  GPUs {status.gpus}  "
            f"restarts {status.restarts}  learner iteration "
            f"{'-' if status.learner_iteration is None else status.learner_iteration}  "
            f"eval return {'-' if status.eval_return is None else f'{status.eval_return:.1f}'}"
        ),
        Text(""),
        components_table(status),
        Text(""),
        processes_table(status),
    ]
    for cond in status.conditions:
        lines.append(Text(f"  condition {cond.type}={cond.status} ({cond.reason}): {cond.message}"))
    return Group(*lines)


def status_json(status: ExperimentStatus) -> dict[str, Any]:
    doc = status.to_wire()
    doc["processes"] = {
        k: v.model_dump(by_alias=True, mode="json") for k, v in status.processes.items()
    }
    return doc
