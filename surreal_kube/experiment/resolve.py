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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from surreal_kube.errors import SpecError
from surreal_kube.experiment.algorithms import ALGORITHMS, DDPGConfig, PPOConfig
from surreal_kube.experiment.names import validate_name
from surreal_kube.experiment.spec import API_VERSION, KIND, Experiment, ExperimentSpec
from surreal_kube.experiment.suggest import did_you_mean
from surreal_kube.experiment.topology import Topology, build_topology

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


def load_yaml_text(text: str, source: str) -> dict[str, Any]:
    """Parse one YAML mapping; syntax errors give the line and column."""
    try:
        data = yaml.safe_load(text)
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
        raise SpecError(f"--set {assignment!r}: expected KEY=VALUE, e.g. spec.agents.count=4")
    path = key.strip().split(".")
    if any(not part for part in path):
        raise SpecError(f"--set {assignment!r}: empty segment in key {key!r}")
    if path[0] not in ("spec", "metadata"):
        path = ["spec", *path]
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise SpecError(f"--set {assignment!r}: value is not valid YAML: {exc}") from exc
    return path, value


def nest(path: Sequence[str], value: Any) -> dict[str, Any]:
    """['a', 'b'], 1 -> {'a': {'b': 1}}."""
    out: Any = value
    for part in reversed(path):
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
    topo = build_topology(exp.metadata.name, exp.spec)
    validate_name(exp.metadata.name, topo.derived_name_suffixes())
    return exp


def experiment_topology(exp: Experiment) -> Topology:
    """The topology of a resolved experiment."""
    return build_topology(exp.metadata.name, exp.spec)


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
    rules = {
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
        "tuple_type": lambda: f"must be a list of two numbers, got {got!r}",
        "union_tag_invalid": lambda: (
            f"must be one of {ctx.get('expected_tags')}, got {ctx.get('tag')!r}"
        ),
    }
    if kind in rules:
        return rules[kind]()
    msg = err["msg"]
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
