"""What the verbs share for experiments on a cluster: kubectl-style options, views, dispatch.

One rule says where an experiment lives, for every verb: `--local` (or `--root DIR`) means the
local experiments of this machine; otherwise the current kube context, as kubectl reads it
(`--kubeconfig`, `--context`, `--namespace`). Nothing is guessed from what exists where; giving
both a local and a kube flag is refused. A name that is not found says where it was looked for,
and points to the other place when the name exists there.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from surreal_kube.errors import SpecError

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from surreal_kube.launch.kube.api.client import Kube
    from surreal_kube.launch.kube.api.target import Target
    from surreal_kube.launch.kube.lifecycle.finding import Found
    from surreal_kube.launch.kube.status.summary import ExperimentStatus

Kubeconfig = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
        show_default=False,
    ),
]
Context = Annotated[
    str | None,
    typer.Option(
        "--context",
        metavar="CONTEXT",
        help="Kubeconfig context (default: the current one).",
        show_default=False,
    ),
]
Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        metavar="NAMESPACE",
        help="Namespace (default: the context's namespace, else 'default').",
        show_default=False,
    ),
]
Profile = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        metavar="FILE",
        help="Cluster profile (YAML: node pools, registry, experiment volume, pull secrets); "
        "placement is checked against its pools. Through the operator it is written into the "
        "Experiment (spec.profile); without it the operator's own profile applies.",
        show_default=False,
    ),
]

_PHASE_STYLE = {"Running": "green", "Pending": "yellow", "Failed": "bold red", "Succeeded": "cyan"}


def target(kubeconfig: Path | None, context: str | None, namespace: str | None) -> Target:
    from surreal_kube.launch.kube.api.target import Target

    return Target(kubeconfig=kubeconfig, context=context, namespace=namespace)


def is_local(
    name: str | None,
    local: bool,
    root: Path | None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    namespace: str | None = None,
) -> bool:
    """The rule of the module docstring; SpecError when local and kube flags are mixed."""
    given = [
        flag
        for flag, value in (
            ("--kubeconfig", kubeconfig),
            ("--context", context),
            ("--namespace", namespace),
        )
        if value is not None
    ]
    chosen = local or root is not None
    if chosen and given:
        which = "--local" if local else "--root"
        raise SpecError(
            f"{which} and {given[0]} contradict each other: {which} works on this machine's "
            f"experiments, {given[0]} on a cluster's; drop one"
        )
    return chosen


def kube_available() -> bool:
    """True when there is a kubeconfig to read or we run in a pod."""
    import os

    return bool(
        os.environ.get("KUBECONFIG")
        or Path("~/.kube/config").expanduser().exists()
        or os.environ.get("KUBERNETES_SERVICE_HOST")
    )


def _local_twin(name: str | None) -> Path | None:
    """The folder of a local experiment named `name`, when there is one."""
    if not name:
        return None
    from surreal_kube.launch.local.folder import ExperimentFolder

    folder = ExperimentFolder.of(name)
    return folder.path.parent if folder.exists() else None


def connect(where: Target, name: str | None = None, *, creating: bool = False) -> Kube:
    """The connection for a kube verb; without any kube context, say so and point to --local."""
    from surreal_kube.errors import LaunchError

    if where.kubeconfig is None and not kube_available():
        context = "there is no kube context (no $KUBECONFIG, no ~/.kube/config, not in a pod)"
        if creating:
            raise LaunchError(
                f"cannot create {name!r} on a cluster: {context}; "
                "to run it on this machine as local processes add --local"
            )
        twin = _local_twin(name)
        hint = (
            f"a local experiment {name!r} exists under {twin}: add --local"
            if twin
            else "for local experiments add --local (or --root DIR)"
        )
        what = f"no experiment named {name!r}: " if name else "nothing to list: "
        raise LaunchError(f"{what}{context}; {hint}")
    return where.connect()


def find(kube: Kube, name: str) -> Found:
    """The experiment on the cluster; not found names the namespace, context and local twin."""
    from surreal_kube.errors import LaunchError
    from surreal_kube.launch.kube.lifecycle import finding

    found = finding.find_or_none(kube, name)
    if found is None:
        twin = _local_twin(name)
        hint = (
            f"a local experiment {name!r} exists under {twin}: add --local"
            if twin
            else "see `surreal-kube list`"
        )
        raise LaunchError(
            f"no experiment named {name!r} in namespace {kube.namespace!r} "
            f"(context {kube.context}); {hint}"
        )
    return found


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
    from rich.text import Text

    return Text(phase or "-", style=_PHASE_STYLE.get(phase or "", ""))


def components_table(status: ExperimentStatus) -> Table:
    """One row per component: ready/desired, restarts, why not ready."""
    from rich.table import Table
    from rich.text import Text

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
    from rich.console import Group
    from rich.text import Text

    head = Text.assemble(
        (f"{name} ", "bold"),
        phase_text(status.phase),
        f"  {status.ready} pods ready  agents {status.agents}  {time.monotonic() - started:.0f}s",
    )
    return Group(head, components_table(status))


def processes_table(status: ExperimentStatus) -> Text:
    """One row per pod: phase, ready, restarts, node, reason.

    Aligned text, not a rich Table: a Table measures and renders every cell of every row, so the
    1,022 pods of a 10,000-agent experiment took seconds to print, longer than the whole status
    of that experiment is meant to take (`bench/scale.py`). Columns are padded to their widest
    cell as kubectl pads them; only the phase is styled. Printed with soft wrap (`status`), a
    long reason runs on as kubectl's does, for the terminal to wrap, instead of being cut.
    """
    from rich.text import Text

    from surreal_kube.cli.output import column_widths

    columns = ("POD", "PHASE", "READY", "RESTARTS", "NODE", "REASON")
    rows = [
        (
            proc.pod,
            proc.phase or "-",
            "yes" if proc.ready else "no",
            str(proc.restarts),
            proc.node or "-",
            proc.reason or "",
        )
        for proc in status.processes.values()
    ]
    widths = column_widths(columns, rows)
    text = Text("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in rows:
        line = Text()
        for column, cell, width in zip(columns, row, widths, strict=True):
            line.append(cell, style=_PHASE_STYLE.get(cell, "") if column == "PHASE" else "")
            line.append(" " * (width - len(cell) + 2))
        line.rstrip()
        text.append("\n")
        text.append_text(line)
    return text


def status_view(name: str, namespace: str, status: ExperimentStatus, via: str) -> Group:
    """`status NAME` on a cluster."""
    from rich.console import Group
    from rich.text import Text

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
        Text(
            f"  env steps {'-' if status.env_steps is None else f'{status.env_steps:,}'}  "
            "steps/s "
            + (
                "-"
                if status.env_steps_per_second is None
                else f"{status.env_steps_per_second:,.0f}"
            )
            + f"  progress {status.progress or '-'}"
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
