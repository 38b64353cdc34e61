"""`surreal-kube scale NAME --agents N`: change the number of agents of a running experiment."""

from __future__ import annotations

from typing import Annotated

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import info, result
from surreal_kube.errors import SpecError


def scale(
    name: so.Name,
    agents: Annotated[
        int,
        typer.Option(
            "--agents", metavar="N", help="The new number of agents (a multiple of agents.batch)."
        ),
    ],
    wait: Annotated[
        bool, typer.Option("--wait", help="Return once the agent pods are running.")
    ] = False,
    timeout: Annotated[
        str,
        typer.Option("--timeout", metavar="DURATION", help="How long --wait waits (300, 5m)."),
    ] = "300",
    profile: kv.Profile = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Scale an experiment's agents up or down; the learner keeps running untouched.

    Replay and the parameter server keep running too; new agents connect on their own.

    Through the operator this edits the Experiment's scale subresource (like `kubectl scale
    experiment NAME --replicas N`); for a directly applied experiment it re-renders and applies.

    Examples:

    \b
      surreal-kube scale exp-ppo-ant --agents 16
      surreal-kube scale exp-ppo-ant --agents 4 --wait -n rl
    """
    from surreal_kube.launch.kube.lifecycle import scaling, waiting
    from surreal_kube.launch.kube.profile import load_profile

    if agents < 1:  # bad input is refused before any kubeconfig is read
        raise SpecError(f"--agents: must be >= 1, got {agents}")
    seconds = so.parse_duration(timeout, "--timeout") or 0.0
    kube = kv.connect(kv.target(kubeconfig, context, namespace), name)
    found = kv.find(kube, name)
    prof = load_profile(profile) if profile is not None else None
    before = found.exp.spec.agents.count
    new = scaling.scale(kube, found, agents, profile=prof, progress=info)
    info(f"{name}: agents {before} -> {agents}")
    if wait:
        found.exp = new
        st = waiting.wait_running(kube, found, timeout=seconds)
        if st.phase == "Succeeded":
            info(f"{name}: finished before the new agents were ready: {st.reason}")
        else:
            info(f"{name}: {st.agents} agents ready")
    result(name)
