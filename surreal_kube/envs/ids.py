"""Checking an environment id against gymnasium's registry, without building the environment.

Every verb that resolves an experiment (`config`, `topology`, `render`, `create` on any backend)
calls `check_env_id`, so a mistyped id is refused on the laptop, once, with one suggestion, and
never ships as a pod that crashes at start. Only the registry is read: nothing here imports
MuJoCo or torch (about 0.3 s for gymnasium itself). Building, resetting and rendering the
environment is `make.check_env`'s job, which only `create --local` can afford.

gymnasium reports an outdated version (`HalfCheetah-v4` when `v5` exists) as a coloured
DeprecationWarning; `check_env_id` returns it as a plain note instead, and `quiet_gymnasium`
turns the raw warnings of `gymnasium.make` into plain log lines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import re
import threading
import warnings
from collections.abc import Iterator

from gymnasium.envs.registration import find_highest_version, registry
from gymnasium.envs.registration import parse_env_id as parse_gym_id

from surreal_kube.errors import SpecError
from surreal_kube.experiment.suggest import did_you_mean

log = logging.getLogger(__name__)

PREFIXES = ("gym",)
FORM = "'gym:<gymnasium id>', e.g. gym:Ant-v5"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_nesting = threading.local()


def strip_ansi(text: str) -> str:
    """`text` without terminal colour codes (gymnasium colours its warnings)."""
    return _ANSI.sub("", text)


def _suggest(name: str) -> str:
    """`; did you mean 'gym:X'?` for the closest registered id, or ''."""
    hint = did_you_mean(name, registry)  # compared without the prefix, which every id shares
    return hint.replace("mean '", "mean 'gym:", 1)


def check_env_id(env_id: str) -> list[str]:
    """Refuse an id gymnasium does not know (SpecError); returns notes such as "out of date".

    Accepted forms: `gym:<id>` with `<id>` in gymnasium's registry, and gymnasium's own
    `gym:<module>:<id>` (the module registers the id when imported; it must be importable here,
    but is not imported, so the id itself is checked when the environment is built).
    """
    prefix, sep, name = env_id.partition(":")
    if not sep or prefix not in PREFIXES or not name:
        bare = env_id if not sep else name
        hint = f"; did you mean 'gym:{bare}'?" if bare in registry else _suggest(bare)
        raise SpecError(f"environment id {env_id!r} must look like {FORM}{hint}")
    module, colon, gym_id = name.rpartition(":")
    if colon:
        if not module or importlib.util.find_spec(module.split(".")[0]) is None:
            raise SpecError(
                f"environment id {env_id!r}: module {module!r} cannot be imported here; "
                f"valid ids look like {FORM} or gym:<module>:<id>"
            )
        return []
    if gym_id not in registry:
        hint = _suggest(gym_id)
        if not hint:
            hint = "; `python -c 'import gymnasium; gymnasium.pprint_registry()'` lists them"
        raise SpecError(f"unknown environment {env_id!r}: not in gymnasium's registry{hint}")
    ns, base, version = parse_gym_id(gym_id)
    newest = find_highest_version(ns, base)
    if version is not None and newest is not None and newest > version:
        prefix_ns = f"{ns}/" if ns else ""
        return [f"{env_id} is out of date; the newest is gym:{prefix_ns}{base}-v{newest}"]
    return []


@contextlib.contextmanager
def quiet_gymnasium(*, keep_deprecations: bool = True) -> Iterator[None]:
    """Turn gymnasium's coloured warnings into plain log lines (or drop its deprecations).

    Used around `gymnasium.make`, so that neither a terminal nor a log file sees raw ANSI codes.
    Nested uses defer to the outermost one, which decides about deprecations.
    """
    if getattr(_nesting, "active", False):
        yield
        return
    _nesting.active = True
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        _nesting.active = False
    seen: set[str] = set()
    for w in caught:
        text = strip_ansi(str(w.message)).strip()
        if text.startswith("WARN: "):
            text = text[len("WARN: ") :]
        if text in seen or (issubclass(w.category, DeprecationWarning) and not keep_deprecations):
            continue
        seen.add(text)
        log.warning("%s", text)
