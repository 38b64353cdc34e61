"""Resolving an experiment: defaults -> spec file -> flags -> `--set`, later wins.

The result is validated once, with errors that name the field path and the rule, so that every
consumer (CLI, backends, operator, roles) gets a complete, explicit experiment. The resolved YAML
round-trips byte for byte: `config -o yaml` fed back with `-f` reproduces itself.
"""

from __future__ import annotations

import copy
import json
import re
import typing
from collections.abc import Callable, Mapping, Sequence, Sized
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from surreal_kube.errors import SpecError
from surreal_kube.experiment.algorithms import ALGORITHMS, DDPGConfig, PPOConfig
from surreal_kube.experiment.names import validate_name
from surreal_kube.experiment.spec import API_VERSION, KIND, Experiment, ExperimentSpec
from surreal_kube.experiment.suggest import did_you_mean

# Per-algorithm defaults that differ from the field defaults (DESIGN.md section 6).
_ALGORITHM_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": {
        "algorithm": PPOConfig().model_dump(by_alias=True, mode="json"),
        "replay": {"kind": "fifo", "capacity": 4096, "startSampling": 64},
    },
    "ddpg": {
        "algorithm": DDPGConfig().model_dump(by_alias=True, mode="json"),
        "replay": {"kind": "uniform", "capacity": 1_000_000, "startSampling": 3000},
    },
}


def default_document(name: str, algorithm: str = "ppo") -> dict[str, Any]:
    """The built-in defaults for `algorithm`, as a plain document."""
    spec = ExperimentSpec().model_dump(by_alias=True, mode="json")
    defaults = copy.deepcopy(_ALGORITHM_DEFAULTS[algorithm])
    spec["algorithm"] = defaults.pop("algorithm")  # replaced whole: algorithms share no keys
    deep_merge(spec, defaults)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `override` into `base` in place: maps merge key by key, anything else replaces."""
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _replace_one_of(doc: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """An image is either prebuilt or built: a layer naming one replaces the other entirely."""
    images = layer.get("spec", {}).get("images")
    if not isinstance(images, Mapping):
        return
    current = doc["spec"].setdefault("images", {})
    for key, value in images.items():
        if not isinstance(value, Mapping) or not isinstance(current.get(key), dict):
            continue
        for given, other in (("image", "build"), ("build", "image")):
            if value.get(given) is not None and other not in value:
                current[key][other] = None


MAX_SPEC_BYTES = 1 << 20
"""A spec file or a `--set` value larger than this (1 MiB) is refused before parsing: a resolved
experiment is a few KB."""
MAX_DEPTH = 32
"""Nesting deeper than this is refused: the spec is 5 levels deep, and every consumer (the
merge, pydantic, the JSON writer) recurses once per level."""
MAX_NODES = 20_000
"""More YAML values than this, counted with aliases expanded, are refused: a resolved spec has
about 200, and `&a [*b, *b, ...]` chains (billion laughs) grow exponentially in whatever walks
the parsed document."""
MAX_SETS = 10_000
"""`--set` assignments beyond this many are refused (10,000 take about a second)."""


class _Limits:
    """Composition with limits on depth and size, both counted through aliases.

    Composition is PyYAML's own recursion, so the running depth is checked as it descends
    (before Python's recursion limit could be hit). The size is a running count of values with
    every alias counted at its anchored node's full size, so a document is refused as soon as it
    passes the limit; each node's expanded size and height are memoized, so an alias costs one
    look-up however large its node is. Mixed into a loader class (see `_loader`).
    """

    source: str
    _depth: int
    _count: int
    _measure: dict[int, tuple[int, int]]

    def _refuse(self, what: str, mark: yaml.Mark | None) -> SpecError:
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return SpecError(f"{self.source}: {what}{where}")

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise self._refuse(
                    f"nested deeper than {MAX_DEPTH} levels (the limit)",
                    self.peek_event().start_mark,  # type: ignore[attr-defined]
                )
            alias = self.check_event(yaml.AliasEvent)  # type: ignore[attr-defined]
            node = yaml.composer.Composer.compose_node(self, parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1
        if node is None:  # PyYAML composes a node here or raises; its stubs allow None
            raise SpecError(f"{self.source}: a YAML value that composes to nothing")
        size, height = self._measure_node(node)
        self._count += size if alias else 1
        if self._count > MAX_NODES:
            raise self._refuse(
                f"more than {MAX_NODES:,} values with aliases expanded (the limit)",
                node.start_mark,
            )
        if height > MAX_DEPTH:
            raise self._refuse(
                f"nested deeper than {MAX_DEPTH} levels through aliases (the limit)",
                node.start_mark,
            )
        return node

    def _measure_node(self, node: yaml.Node) -> tuple[int, int]:
        """(values, levels) of a node with its aliases expanded; its children are measured."""
        known = self._measure.get(id(node))
        if known is not None:
            return known
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        size, height = 1, 1
        for child in children:
            child_size, child_height = self._measure.get(id(child), (1, 1))
            size += child_size
            height = max(height, child_height + 1)
        self._measure[id(node)] = (size, height)
        return size, height


def _loader(text: str, source: str) -> Any:
    """A safe loader with `_Limits`: libyaml's parser when present (faster), else PyYAML's."""
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    parser: Any
    try:
        from yaml._yaml import CParser

        parser = CParser
    except ImportError:  # PyYAML built without libyaml
        parser = None
    if parser is None:

        class PyLoader(_Limits, yaml.SafeLoader):
            pass

        loader: Any = PyLoader(text)
    else:

        class CLoader(_Limits, parser, SafeConstructor, Resolver):  # type: ignore[misc]
            # libyaml's parser composes in C; the Python composer (with the limits) is used
            get_single_node = Composer.get_single_node
            compose_document = Composer.compose_document
            compose_scalar_node = Composer.compose_scalar_node
            compose_sequence_node = Composer.compose_sequence_node
            compose_mapping_node = Composer.compose_mapping_node

            def __init__(self, stream: str) -> None:
                parser.__init__(self, stream)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)
                self.anchors: dict[str, yaml.Node] = {}

        loader = CLoader(text)
    loader.source = source
    loader._depth = loader._count = 0
    loader._measure = {}
    return loader


def _safe_load(text: str, source: str) -> Any:
    """yaml.safe_load within MAX_SPEC_BYTES, MAX_DEPTH and MAX_NODES (SpecError beyond them)."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(
            f"{source}: {len(text) / (1 << 20):.1f} MiB is too large for an experiment spec "
            f"(the limit is {MAX_SPEC_BYTES >> 20} MiB; a resolved experiment is a few KB)"
        )
    loader = _loader(text, source)
    try:
        return loader.get_single_data()
    except ValueError as exc:  # the constructor's own limits (an integer of 5,000 digits)
        raise SpecError(f"{source}: {exc}") from None
    finally:
        loader.dispose()


def load_yaml_text(text: str, source: str) -> dict[str, Any]:
    """Parse one YAML mapping within the size limits; syntax errors give the line and column."""
    try:
        data = _safe_load(text, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise SpecError(f"{source}: invalid YAML at {where}: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: must be a mapping (an Experiment document), got {type(data).__name__}"
        )
    return data


def load_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a spec file (either a whole Experiment document or just its `spec`)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if p.is_file() and size > MAX_SPEC_BYTES:
            raise SpecError(
                f"spec file {str(p)!r} is {size / (1 << 20):.1f} MiB, too large for an "
                f"experiment spec (the limit is {MAX_SPEC_BYTES >> 20} MiB)"
            )
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise SpecError(f"spec file {str(p)!r} does not exist") from exc
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise SpecError(f"spec file {str(p)!r} cannot be read: {exc}") from exc
    data = load_yaml_text(text, str(p))
    if "spec" not in data and "apiVersion" not in data and "kind" not in data:
        data = {"spec": data}
    return data


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """`spec.agents.count=4` -> (['spec', 'agents', 'count'], 4); values parse as YAML scalars."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise SpecError(
            f"--set {_short(assignment)!r}: expected KEY=VALUE, e.g. spec.agents.count=4"
        )
    path = key.strip().split(".")
    if any(not part for part in path):
        raise SpecError(f"--set {_short(assignment)!r}: empty segment in key")
    if len(path) > MAX_DEPTH:
        raise SpecError(
            f"--set {_short(assignment)!r}: the key has {len(path)} segments; "
            f"the limit is {MAX_DEPTH}"
        )
    if path[0] not in ("spec", "metadata"):
        path = ["spec", *path]
    try:
        value = _safe_load(raw, f"--set {key.strip()}") if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise SpecError(f"--set {_short(assignment)!r}: value is not valid YAML: {exc}") from exc
    return path, value


def _short(text: str, limit: int = 80) -> str:
    """`text`, cut to `limit` characters for an error line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nest(path: Sequence[str], value: Any) -> dict[str, Any]:
    """['a', 'b'], 1 -> {'a': {'b': 1}} (a path of at least one key)."""
    if not path:
        raise ValueError("nest needs a path of at least one key")
    out: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        out = {part: out}
    return out


def resolve_experiment(
    name: str,
    *,
    spec_files: Sequence[str | Path] = (),
    flags: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
) -> Experiment:
    """Resolve and validate an experiment; raises SpecError with a precise message."""
    if len(sets) > MAX_SETS:
        raise SpecError(f"--set: {len(sets):,} assignments given; the limit is {MAX_SETS:,}")
    layers: list[dict[str, Any]] = [load_spec_file(f) for f in spec_files]
    flag_layer: dict[str, Any] = {}
    for dotted, value in (flags or {}).items():
        if value is not None:
            deep_merge(flag_layer, nest(["spec", *dotted.split(".")], value))
    layers.append(flag_layer)
    layers.extend(nest(*parse_set(s)) for s in sets)

    algorithm = "ppo"
    for layer in layers:
        algo = (
            layer.get("spec", {}).get("algorithm") if isinstance(layer.get("spec"), dict) else None
        )
        if isinstance(algo, Mapping) and "name" in algo:
            algorithm = algo["name"]
    if algorithm not in ALGORITHMS:
        raise SpecError(
            f"spec.algorithm.name: unknown algorithm {algorithm!r}"
            f"{did_you_mean(str(algorithm), ALGORITHMS)}; valid: {', '.join(ALGORITHMS)}"
        )
    doc = default_document(name, algorithm)
    for layer in layers:
        if not isinstance(layer.get("spec", {}), Mapping):
            raise SpecError("spec: must be a mapping")
        _replace_one_of(doc, layer)
        deep_merge(doc, layer)
    doc.setdefault("metadata", {})
    if doc["metadata"].get("name") != name:
        file_name = doc["metadata"].get("name")
        if file_name and spec_files:
            raise SpecError(
                f"metadata.name: the spec file names the experiment {file_name!r} "
                f"but the command line says {name!r}"
            )
        doc["metadata"]["name"] = name
    return validate_document(doc)


def validate_document(doc: Mapping[str, Any]) -> Experiment:
    """Validate a complete document: schema, names against the real topology sizes."""
    try:
        exp = Experiment.model_validate(doc)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, doc)) from None
    validate_name(exp.metadata.name, exp.topology.derived_name_suffixes())
    return exp


def dump_yaml(exp: Experiment) -> str:
    """The resolved experiment as YAML, stable key order: what `config -o yaml` prints."""
    return yaml.safe_dump(to_document(exp), sort_keys=False, default_flow_style=False, width=100)


def dump_json(exp: Experiment) -> str:
    """The resolved experiment as indented JSON."""
    return json.dumps(to_document(exp), indent=2) + "\n"


def to_document(exp: Experiment) -> dict[str, Any]:
    """Plain, JSON-compatible document (tuples become lists)."""
    return exp.model_dump(by_alias=True, mode="json", exclude_none=False)


def load_experiment_file(path: str | Path) -> Experiment:
    """Load a resolved experiment written by a backend (the SURREAL_CONFIG file)."""
    data = load_spec_file(path)
    return validate_document(data)


# ---------------------------------------------------------------------------- errors


def format_validation_error(exc: ValidationError, doc: Mapping[str, Any]) -> str:
    """One line per problem: `spec.agents.count: must be >= 1, got 0`."""
    lines = []
    for err in exc.errors():
        tagged = [str(p) for p in err["loc"]]
        loc = _strip_union_tags(tagged)
        message = _message(err, tagged)
        relative = _RELATIVE.match(message)
        if relative and err["type"] == "value_error":
            # cross-field checks name their field relative to the model that ran them
            loc = [*loc, *relative.group(1).split(".")]
            message = message[relative.end() :]
        where = ".".join(loc) or "document"
        lines.append(f"{where}: {message}")
    # pydantic may report one problem once per union member; keep the first of each line
    unique = list(dict.fromkeys(lines))
    return unique[0] if len(unique) == 1 else "invalid experiment:\n  " + "\n  ".join(unique)


def _strip_union_tags(loc: list[str]) -> list[str]:
    """Drop the discriminator tag pydantic inserts (`spec.algorithm.ppo.gamma`)."""
    if len(loc) >= 3 and loc[:2] == ["spec", "algorithm"] and loc[2] in ALGORITHMS:
        return loc[:2] + loc[3:]
    return loc


def _message(err: Mapping[str, Any], loc: list[str]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "extra_forbidden":
        key = loc[-1] if loc else "?"
        known = _known_keys(loc[:-1])  # loc still carries the union tag here
        hint = did_you_mean(key, known) if known else ""
        valid = f" (valid keys: {', '.join(sorted(known))})" if known and not hint else ""
        return f"unknown key {key!r}{hint}{valid}"
    rules: dict[str, Callable[[], str]] = {
        "greater_than_equal": lambda: f"must be >= {ctx.get('ge')}, got {got!r}",
        "greater_than": lambda: f"must be > {ctx.get('gt')}, got {got!r}",
        "less_than_equal": lambda: f"must be <= {ctx.get('le')}, got {got!r}",
        "less_than": lambda: f"must be < {ctx.get('lt')}, got {got!r}",
        "literal_error": lambda: f"must be one of {ctx.get('expected')}, got {got!r}",
        "missing": lambda: "is required",
        "int_parsing": lambda: f"must be an integer, got {got!r}",
        "int_from_float": lambda: f"must be an integer, got {got!r}",
        "int_type": lambda: f"must be an integer, got {got!r}",
        "float_parsing": lambda: f"must be a number, got {got!r}",
        "float_type": lambda: f"must be a number, got {got!r}",
        "bool_parsing": lambda: f"must be true or false, got {got!r}",
        "bool_type": lambda: f"must be true or false, got {got!r}",
        "string_type": lambda: f"must be a string, got {got!r}",
        "dict_type": lambda: f"must be a mapping, got {got!r}",
        "model_type": lambda: f"must be a mapping, got {got!r}",
        "model_attributes_type": lambda: f"must be a mapping, got {got!r}",
        "list_type": lambda: f"must be a list, got {got!r}",
        "too_long": lambda: (
            f"must have at most {ctx.get('max_length')} entries, got "
            f"{len(got) if isinstance(got, Sized) else ctx.get('actual_length')}"
        ),
        "string_too_long": lambda: f"must be at most {ctx.get('max_length')} characters long",
        "tuple_type": lambda: f"must be a list of two numbers, got {got!r}",
        "union_tag_invalid": lambda: (
            f"must be one of {ctx.get('expected_tags')}, got {ctx.get('tag')!r}"
        ),
    }
    if kind in rules:
        return rules[kind]()
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg


_RELATIVE = re.compile(r"^([a-zA-Z][a-zA-Z0-9.]*): ")


_ALGORITHM_MODELS: dict[str, type[BaseModel]] = {"ppo": PPOConfig, "ddpg": DDPGConfig}


def _known_keys(tagged_loc: list[str]) -> list[str]:
    """The valid keys at a location (with pydantic's union tag, e.g. `spec.algorithm.ppo`)."""
    model: type[BaseModel] | None = Experiment
    for part in tagged_loc:
        if model is None:
            return []
        model = _child_model(model, part)
    return [f.alias or n for n, f in model.model_fields.items()] if model else []


def _child_model(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    if key in _ALGORITHM_MODELS and model is ExperimentSpec:
        return None
    for name, field in model.model_fields.items():
        if key not in (name, field.alias):
            continue
        if name == "algorithm" and model is ExperimentSpec:
            return _AlgorithmSlot
        for candidate in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                return candidate
        return None
    if model is _AlgorithmSlot:
        return _ALGORITHM_MODELS.get(key)
    return None


class _AlgorithmSlot(BaseModel):
    """Stands for `spec.algorithm` while walking a location: its child is chosen by the tag."""
