"""The options every verb that takes an experiment shares, and how they become an Experiment.

Layering (later wins): built-in defaults -> `-f` files -> these flags -> `--set`.

Only typer is imported here at module level: the spec models (pydantic) are imported when a verb
runs, not when `--help` is drawn.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from surreal_kube.errors import SpecError

if TYPE_CHECKING:
    from surreal_kube.experiment.spec import Experiment

Name = Annotated[
    str,
    typer.Argument(metavar="NAME", help="Experiment name: a DNS-1035 label, e.g. exp-ppo-ant."),
]
SpecFiles = Annotated[
    list[Path] | None,
    typer.Option(
        "--file",
        "-f",
        metavar="FILE",
        help="Spec file (YAML), repeatable, later files win; '-' reads standard input.",
        show_default=False,
    ),
]
Algorithm = Annotated[
    str | None,
    typer.Option(
        "--algorithm", "-a", metavar="ppo|ddpg", help="The algorithm.", show_default=False
    ),
]
Env = Annotated[
    str | None,
    typer.Option(
        "--env", "-e", metavar="ID", help="Environment id, e.g. gym:Ant-v5.", show_default=False
    ),
]
NumAgents = Annotated[
    int | None,
    typer.Option("--num-agents", metavar="N", help="Number of agents.", show_default=False),
]
NumEvals = Annotated[
    int | None,
    typer.Option("--num-evals", metavar="N", help="Number of eval processes.", show_default=False),
]
AgentBatch = Annotated[
    int | None,
    typer.Option(
        "--agent-batch",
        metavar="N",
        help="Agents per process (pod); must divide --num-agents.",
        show_default=False,
    ),
]
MaxEnvSteps = Annotated[
    int | None,
    typer.Option(
        "--max-env-steps",
        metavar="N",
        help="Stop after this many env steps in total.",
        show_default=False,
    ),
]
MaxTime = Annotated[
    str | None,
    typer.Option(
        "--max-time",
        metavar="DURATION",
        help="Stop after this much wall time: seconds, or 90s, 10m, 2h, 1d.",
        show_default=False,
    ),
]
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="PATH=VALUE",
        help="Override any field, e.g. spec.agents.count=4 (repeatable).",
        show_default=False,
    ),
]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str | float | None, flag: str) -> float | None:
    """`600`, `90s`, `5m`, `2h`, `1d` -> seconds; SpecError naming the flag otherwise.

    kubectl users type `--timeout 5m`; a plain number means seconds, as before.
    """
    if text is None or isinstance(text, int | float):
        return None if text is None else float(text)
    match = _DURATION.match(text.strip())
    if not match:
        raise SpecError(f"{flag} {text!r}: expected a duration such as 600, 90s, 5m, 2h or 1d")
    return float(match.group(1)) * _UNIT[match.group(2)]


def _stdin_files(files: list[Path] | None) -> list[Path]:
    """`-f -` reads the spec from standard input (once)."""
    given = list(files or ())
    if sum(str(f) == "-" for f in given) > 1:
        raise SpecError("-f -: standard input can be read only once")
    return [Path("/dev/stdin") if str(f) == "-" else f for f in given]


def resolve_from_cli(
    name: str,
    files: list[Path] | None,
    algorithm: str | None,
    env: str | None,
    num_agents: int | None,
    num_evals: int | None,
    agent_batch: int | None,
    sets: list[str] | None,
    max_env_steps: int | None = None,
    max_time: str | float | None = None,
) -> Experiment:
    """Resolve the experiment the flags describe (raises SpecError on bad input).

    The environment id is checked against gymnasium's registry here, so every verb refuses an
    unknown one (`--env CartPole-v1` is pointed to gym:CartPole-v1) before anything is built.
    """
    from surreal_kube.envs.ids import check_env_id  # lazy: gymnasium is not needed for --help
    from surreal_kube.experiment.resolve import resolve_experiment

    if env is not None:
        check_env_id(env)
    flags = {
        "algorithm.name": algorithm,
        "env.id": env,
        "agents.count": num_agents,
        "evals.count": num_evals,
        "agents.batch": agent_batch,
        "session.maxEnvSteps": max_env_steps,
        "session.maxTimeSeconds": parse_duration(max_time, "--max-time"),
    }
    exp = resolve_experiment(name, spec_files=_stdin_files(files), flags=flags, sets=sets or ())
    for note in check_env_id(exp.spec.env.id):
        from surreal_kube.cli.output import info

        info(f"warning: {note}")
    return exp


Root = Annotated[
    Path | None,
    typer.Option(
        "--root",
        metavar="DIR",
        help="Folder of local experiments (default $SURREAL_KUBE_ROOT, else "
        "~/.surreal-kube/experiments); implies --local.",
        show_default=False,
    ),
]
Local = Annotated[
    bool,
    typer.Option(
        "--local",
        help="Run every component as a process on this machine instead of on the kube context.",
    ),
]
LocalManaged = Annotated[
    bool,
    typer.Option(
        "--local",
        help="Work on the local experiments of this machine (under --root), not the kube context.",
    ),
]
