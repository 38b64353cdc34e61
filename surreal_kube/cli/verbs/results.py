"""`surreal-kube results NAME -o DIR`: fetch a finished run's results to this machine.

The three files of session/results.py (`summary.json`, `learning_curve.png`, `curve.jsonl`), the
same for both backends. On a cluster they come from the ConfigMap `<exp>-results`, which
tensorplex fills when the run reaches its budget (runtime/conductor.py) and which outlives the
pods it then scales to 0, so this works after compute was released, without any pod, through the
API server alone. A local experiment's come from its folder. Without results yet it says what the
run is doing now instead, in one line.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Annotated, Any

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import info, result
from surreal_kube.errors import LaunchError

OutputDir = Annotated[
    Path | None,
    typer.Option(
        "--output-dir",
        "-o",
        metavar="DIR",
        help="Where to write the files (created; default ./NAME-results).",
        show_default=False,
    ),
]


def results(
    name: so.Name,
    output_dir: OutputDir = None,
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Fetch a finished run's results: summary.json, learning_curve.png, curve.jsonl.

    On a cluster from the ConfigMap NAME-results, written when the run reached its budget (also
    after its pods are gone); with --local from the experiment's folder. Prints the paths
    written.

    Examples:

    \b
      surreal-kube results exp-ppo-ant -o ./ant
      surreal-kube results exp-ppo-ant --local -o ./ant
    """
    from surreal_kube.session import results as shared

    target = output_dir or Path(f"{name}-results")
    if kv.is_local(name, local, root, kubeconfig, context, namespace):
        files = _local_files(name, root)
    else:
        files = _kube_files(name, kv.target(kubeconfig, context, namespace))
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for filename in shared.FILES:
        if filename in files:
            path = target / filename
            shared.write_atomic(path, files[filename])
            written.append(path)
    info(_headline(name, files.get(shared.SUMMARY)))
    result("".join(f"{p}\n" for p in written))


def _headline(name: str, summary: bytes | None) -> str:
    """One line on stderr: how the run ended and its final return."""
    import json

    try:
        doc = json.loads(summary or b"{}")
    except ValueError:
        doc = {}
    final = doc.get("final_return")
    return (
        f"{name}: {doc.get('phase', '?')} ({doc.get('reason') or 'no reason given'}), final "
        f"return {'-' if final is None else f'{final:.2f}'}, {doc.get('evaluations', 0)} "
        "evaluations"
    )


def _local_files(name: str, root: Path | None) -> dict[str, bytes]:
    from surreal_kube.launch.local import backend
    from surreal_kube.session import results as shared

    exp = backend.find(name, root)
    folder = exp.folder.results
    if not (folder / shared.SUMMARY).is_file():
        when = (
            "they are written when the run ends"
            if exp.running
            else f"it ended without writing them (see {exp.folder.logs})"
        )
        raise LaunchError(
            f"{name} has no results yet: it is {exp.phase} ({_local_doing(exp.state)}); {when}"
        )
    return {f: (folder / f).read_bytes() for f in shared.FILES if (folder / f).is_file()}


def _local_doing(state: dict[str, Any]) -> str:
    steps, iteration = state.get("env_steps") or 0, state.get("learner_iteration") or 0
    return f"{steps:,} env steps, learner iteration {iteration:,}"


def _kube_files(name: str, where: kv.Target) -> dict[str, bytes]:
    from surreal_kube.launch.kube import naming
    from surreal_kube.launch.kube.api.client import resource
    from surreal_kube.launch.kube.lifecycle import observing
    from surreal_kube.launch.kube.status import progress as kube_progress
    from surreal_kube.session import results as shared

    kube = kv.connect(where, name)
    found = kv.find(kube, name)
    cm = kube.get_or_none(resource("v1", "ConfigMap"), naming.results_name(name), found.namespace)
    data = dict((cm or {}).get("data") or {})
    binary = dict((cm or {}).get("binaryData") or {})
    if shared.SUMMARY not in data:
        st = observing.status_of(kube, found, capacity="none")
        kube_progress.merge(st, kube_progress.read(kube, name, found.namespace))
        session = found.exp.spec.session
        when = (
            "they are written when the run reaches its budget"
            if session.max_env_steps is not None or session.max_time_seconds is not None
            else "it has no budget (session.maxEnvSteps, session.maxTimeSeconds), so it runs "
            "until deleted and writes none"
        )
        doing = st.reason or "-"
        if st.learner_iteration is not None or st.env_steps is not None:
            iteration = "-" if st.learner_iteration is None else f"{st.learner_iteration:,}"
            steps = "-" if st.env_steps is None else f"{st.env_steps:,}"
            doing += f"; learner iteration {iteration}, {steps} env steps"
        raise LaunchError(
            f"{name} has no results yet: it is {st.phase or 'Pending'} ({doing}); {when}"
        )
    files = {k: data[k].encode() for k in (shared.SUMMARY, shared.CURVE) if k in data}
    if shared.PICTURE in binary:
        try:
            files[shared.PICTURE] = base64.b64decode(binary[shared.PICTURE], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise LaunchError(
                f"ConfigMap {naming.results_name(name)}: {shared.PICTURE} is not base64 ({exc})"
            ) from exc
    return files
