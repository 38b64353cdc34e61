"""Experiment names: DNS-1035 labels that stay valid in every name derived from them.

The name becomes Kubernetes object names, label values, Service DNS names and folder names, so it
is validated once, up front, against the longest name the experiment will actually derive. It is
never rewritten silently: a bad name is refused with the rule it breaks and a valid suggestion.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from surreal_kube.errors import InvalidNameError

MAX_LENGTH = 63
_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

CONFIG = "config"
DATA = "data"
PROGRESS = "progress"
RESULTS = "results"
REPORTER = "reporter"
CURVE = "curve"
EXPERIMENT_OBJECTS: tuple[tuple[str, str], ...] = (
    (CONFIG, "the ConfigMap of the resolved spec"),
    (DATA, "the experiment folder's claim"),
    (PROGRESS, "the progress ConfigMap"),
    (RESULTS, "the results ConfigMap"),
    (REPORTER, "the progress reporter's ServiceAccount"),
    (CURVE, "the Secret of the experiment's CURVE key"),
)
"""The objects every experiment has on Kubernetes besides its workloads, `<exp>-<suffix>`, with
what each is: the one list that the name check measures (`Topology.derived_name_suffixes`) and
that launch/kube/naming.py names them from."""


def suggest_name(name: str, max_length: int = MAX_LENGTH) -> str:
    """A valid DNS-1035 label close to `name` (`exp_ppo.Ant` -> `exp-ppo-ant`)."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower())
    text = re.sub(r"-+", "-", text).strip("-")
    if not text:
        return "exp"
    if not text[0].isalpha():
        text = f"exp-{text}"
    text = text[: max(1, max_length)].rstrip("-")
    return text or "exp"


def label_problem(name: str) -> str | None:
    """The first DNS-1035 rule `name` breaks, in words, or None when it is a valid label."""
    if not name:
        return "must not be empty"
    if len(name) > MAX_LENGTH:
        return f"must be at most {MAX_LENGTH} characters, got {len(name)}"
    bad = sorted(
        {c for c in name if not (c.isascii() and (c.islower() or c.isdigit() or c == "-"))}
    )
    if bad:
        shown = " ".join(repr(c) for c in bad)
        return f"may contain only lowercase letters, digits and '-', found {shown}"
    if not name[0].isalpha():
        return f"must start with a lowercase letter, got {name[0]!r}"
    if name.endswith("-"):
        return "must end with a letter or digit, got '-'"
    if not _LABEL.match(name):  # pragma: no cover - the rules above cover the regex
        return "must be a DNS-1035 label"
    return None


def validate_name(name: str, derived: Iterable[tuple[str, str]] = ()) -> str:
    """Return `name` if it and every derived name fit; raise InvalidNameError saying why otherwise.

    `derived` lists (suffix, what) pairs: the name of each derived object is `name + suffix`.
    """
    longest = max(derived, key=lambda pair: len(pair[0]), default=None)
    room = MAX_LENGTH - len(longest[0]) if longest is not None else MAX_LENGTH
    problem = label_problem(name)
    if problem:
        # the suggestion must pass every check, the derived names' limit included
        raise InvalidNameError(
            f"invalid experiment name {name!r}: a DNS-1035 label {problem}; "
            f"try {suggest_name(name, room)!r}"
        )
    if longest is not None and len(name) + len(longest[0]) > MAX_LENGTH:
        suffix, what = longest
        raise InvalidNameError(
            f"experiment name {name!r} is too long for this experiment: {what} "
            f"{name + suffix!r} would be {len(name) + len(suffix)} characters "
            f"(limit {MAX_LENGTH}); use at most {room} characters, "
            f"e.g. {suggest_name(name, room)!r}"
        )
    return name
