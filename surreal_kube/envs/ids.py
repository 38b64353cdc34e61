"""Checking an environment id against gymnasium's registry, without building the environment.

Every verb that resolves an experiment (`config`, `topology`, `render`, `create` on any backend)
calls `check_env_id`, so a mistyped id is refused on the laptop, once, with one suggestion, and
never ships as a pod that crashes at start. Only the registry is read: nothing here imports MuJoCo
or torch, only gymnasium itself (`bench/cli.py` times `config`). Building, resetting and rendering
the environment is `make.check_env`'s job, which only `create --local` can afford.

An environment of the user's own package uses gymnasium's `module:id` form,
`gym:mypkg.envs:Tiny-v0`: gymnasium imports `mypkg.envs`, whose import registers `Tiny-v0`.
`check_env_id` imports the module the same way (it must be importable here: installed, or on
PYTHONPATH) and then checks the id in the registry, so a typo in either part is refused, naming
the part that is wrong, before any process or pod starts. Every role imports the module again
through `gymnasium.make`, in its own process.

gymnasium reports an outdated version (`HalfCheetah-v4` when `v5` exists) as a coloured
DeprecationWarning; `check_env_id` returns it as a plain note instead, and `quiet_gymnasium`
turns the raw warnings of `gymnasium.make` into plain log lines.
"""

from __future__ import annotations

import contextlib
import importlib
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
    `gym:<module>:<id>`: the module is imported here (as `gymnasium.make` will import it in every
    role), and must register `<id>` when imported.
    """
    prefix, sep, name = env_id.partition(":")
    if not sep or prefix not in PREFIXES or not name:
        bare = env_id if not sep else name
        if sep and name and _looks_like_module(prefix):
            hint = f"; did you mean 'gym:{env_id}'?"  # gymnasium's module:id form, unprefixed
        else:
            hint = f"; did you mean 'gym:{bare}'?" if bare in registry else _suggest(bare)
        raise SpecError(f"environment id {env_id!r} must look like {FORM}{hint}")
    module, colon, gym_id = name.rpartition(":")
    if colon:
        _import_env_module(env_id, module)
        if gym_id not in registry:
            hint = _suggest(gym_id)
            raise SpecError(
                f"environment id {env_id!r}: importing module {module!r} registered no "
                f"environment {gym_id!r}{hint}; the module must call "
                f"gymnasium.register(id={gym_id!r}, ...) when imported"
            )
    elif gym_id not in registry:
        hint = _suggest(gym_id)
        if not hint:
            hint = "; `python -c 'import gymnasium; gymnasium.pprint_registry()'` lists them"
        raise SpecError(f"unknown environment {env_id!r}: not in gymnasium's registry{hint}")
    ns, base, version = parse_gym_id(gym_id)
    newest = find_highest_version(ns, base)
    if version is not None and newest is not None and newest > version:
        prefix_ns = f"{ns}/" if ns else ""
        where = f"{module}:" if colon else ""
        return [f"{env_id} is out of date; the newest is gym:{where}{prefix_ns}{base}-v{newest}"]
    return []


def _is_module_name(text: str) -> bool:
    """`mypkg.envs` yes; anything that is not a dotted name of identifiers no."""
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _looks_like_module(text: str) -> bool:
    """A prefix that is a module (`mypkg.envs:Tiny-v0`), not a misspelt backend (`gymnasium:`)."""
    return text not in ("gym", "gymnasium") and _is_module_name(text)


def _import_env_module(env_id: str, module: str) -> None:
    """Import the module of a `gym:<module>:<id>` id, as gymnasium.make does (SpecError if not)."""
    if not _is_module_name(module):
        raise SpecError(
            f"environment id {env_id!r}: {module!r} is not a module name; valid ids look like "
            f"{FORM} or gym:<module>:<id>, e.g. gym:mypkg.envs:Tiny-v0"
        )
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise SpecError(
            f"environment id {env_id!r}: module {module!r} cannot be imported here ({exc}); "
            "install the project that holds it (pip install -e DIR) or put its folder on "
            "PYTHONPATH"
        ) from None
    except Exception as exc:
        raise SpecError(
            f"environment id {env_id!r}: importing module {module!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


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
