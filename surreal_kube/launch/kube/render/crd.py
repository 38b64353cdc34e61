"""The `Experiment` CustomResourceDefinition, generated from the pydantic spec.

The spec model (surreal_kube.experiment.spec) is the one source of truth: its field names, types,
bounds, enums and descriptions become the CRD's structural OpenAPI v3 schema here, so that
`kubectl explain experiment.spec.agents` shows the same words as `surreal-kube config --help`.
`operators/crd.yaml` and the Helm chart's `crds/` hold this output; a test keeps them equal
(`python -m surreal_kube.launch.kube.render.crd > operators/crd.yaml` regenerates it).

Choices:
- No defaults in the schema. Defaults depend on the algorithm (DDPG's replay is uniform with a
  million items, PPO's is FIFO), which a structural schema cannot express; the operator resolves a
  partial spec with the same resolver as the CLI (built-in defaults for its algorithm, then the
  object's spec), and `surreal-kube create` always writes the fully resolved spec.
- The algorithm (a union discriminated by `name`) is one object holding the properties of every
  algorithm, `name` required; the resolver refuses keys of the other algorithm.
- Kubernetes quantities (cpu, memory) are int-or-string, as in a pod spec.
- A CEL rule refuses an agent count the batch does not divide, so that `kubectl scale` and the
  scale subresource get the same answer as the CLI.
- `spec.profile` (optional) is the cluster profile (launch/kube/profile.py) the experiment runs
  with; its keys replace the operator's (launch/kube/plan.py). Not part of the experiment spec the
  roles read: it says how the experiment is placed and stored, not what it learns.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from surreal_kube.experiment.spec import API_VERSION, COMPONENTS, KIND, ExperimentSpec
from surreal_kube.launch.kube.profile import PROFILE_KEY
from surreal_kube.launch.kube.status.summary import ExperimentStatus

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "experiments"
SINGULAR = "experiment"
SHORT_NAMES = ["exp", "exps"]
CATEGORIES = ["surreal"]
CRD_NAME = f"{PLURAL}.{GROUP}"

# (model name in the JSON schema's $defs, property) -> schema override
_INT_OR_STRING = {
    ("Resources", "cpu"),
    ("Resources", "memory"),
    ("NodePool", "cpu"),
    ("NodePool", "memory"),
}
_DROP = ("title", "default", "discriminator", "examples")

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": ".status.ready",
        "description": "running processes (pods) / desired",
    },
    {
        "name": "Agents",
        "type": "string",
        "jsonPath": ".status.agents",
        "description": "ready agents / desired agents",
    },
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
    {"name": "Iteration", "type": "integer", "jsonPath": ".status.learnerIteration"},
    {
        "name": "Steps",
        "type": "integer",
        "jsonPath": ".status.envSteps",
        "description": "environment steps of all agents",
    },
    {
        "name": "Steps/s",
        "type": "number",
        "jsonPath": ".status.envStepsPerSecond",
        "description": "environment steps per second, lately",
    },
    {"name": "Return", "type": "number", "jsonPath": ".status.evalReturn"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Algorithm", "type": "string", "jsonPath": ".spec.algorithm.name", "priority": 1},
    {"name": "Env", "type": "string", "jsonPath": ".spec.env.id", "priority": 1},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
]

SCALE = {
    "specReplicasPath": ".spec.agents.count",
    "statusReplicasPath": ".status.agentsReady",
    "labelSelectorPath": ".status.agentSelector",
}

AGENTS_RULE = {
    "rule": "!has(self.count) || !has(self.batch) || self.count % self.batch == 0",
    "message": "agents.batch must divide agents.count: every agent pod runs the same number "
    "of agents",
}

# What the resolver refuses beyond types and bounds, as CEL rules on the node they concern, so
# that `kubectl apply` of an Experiment the operator cannot run is refused by the API server with
# the field's path (`spec.replay: Invalid value: ...`), the same words as the CLI's error.
# `env.kwargs` has none: its values are mixed scalars, which a structural schema can only leave
# untyped (preserve-unknown-fields), and CEL cannot see untyped fields; the operator refuses a
# nested kwarg (InvalidSpec), and maxProperties bounds how many there are.
_COMPONENT_LIST = "[" + ", ".join(f"'{c}'" for c in COMPONENTS) + "]"
RULES: dict[tuple[str, ...], list[dict[str, str]]] = {
    (): [
        {
            "rule": "(has(self.algorithm) && self.algorithm.name != 'ppo') || !has(self.replay)"
            " || !has(self.replay.kind) || self.replay.kind == 'fifo'",
            "message": "ppo is on-policy and needs 'fifo'",
            "fieldPath": ".replay.kind",
        }
    ],
    ("agents",): [AGENTS_RULE],
    ("env", "id"): [
        {
            "rule": "self.startsWith('gym:') && size(self) > 4",
            "message": "must look like 'gym:<gymnasium id>' (e.g. gym:Ant-v5)",
        }
    ],
    ("replay",): [
        {
            "rule": "!has(self.startSampling) || !has(self.capacity)"
            " || self.startSampling <= self.capacity",
            "message": "must be <= replay.capacity",
            "fieldPath": ".startSampling",
        }
    ],
    ("resources",): [
        {
            "rule": f"self.all(k, k in {_COMPONENT_LIST})",
            "message": f"unknown component; valid: {', '.join(COMPONENTS)}",
        }
    ],
    ("placement",): [
        {
            "rule": f"self.all(k, k in {_COMPONENT_LIST})",
            "message": f"unknown component; valid: {', '.join(COMPONENTS)}",
        }
    ],
}
QUANTITY_RULES: dict[str, dict[str, str]] = {
    "cpu": {
        "rule": "type(self) == int ? self > 0 : isQuantity(self) && quantity(self).isGreaterThan("
        "quantity('0'))",
        "message": "must be a Kubernetes quantity > 0 (examples: 500m, 2, 1.5)",
    },
    "memory": {
        "rule": "type(self) == int ? self > 0 : isQuantity(self) && quantity(self).isGreaterThan("
        "quantity('0')) && !self.endsWith('m')",
        "message": "must be a Kubernetes quantity > 0 in bytes (examples: 512Mi, 4Gi)",
    },
}
"""Quantities are int-or-string: the string must parse as the API server parses quantities."""


def structural(schema: dict[str, Any], defs: dict[str, Any], owner: str = "") -> dict[str, Any]:
    """Convert one pydantic JSON-schema node into a structural OpenAPI v3 node."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        resolved = structural(defs[name], defs, name)
        if "description" in schema:
            resolved["description"] = schema["description"]
        return resolved
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _union(schema, schema[key], defs)
    out: dict[str, Any] = {}
    if "description" in schema:
        out["description"] = schema["description"]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        out["type"] = "object"
        if "properties" in schema:
            props = {}
            for prop, sub in schema["properties"].items():
                if (owner, prop) in _INT_OR_STRING:
                    props[prop] = {
                        "x-kubernetes-int-or-string": True,
                        **({"description": sub["description"]} if "description" in sub else {}),
                    }
                else:
                    props[prop] = structural(sub, defs)
            out["properties"] = props
            required = [r for r in schema.get("required", []) if r in props]
            if required:
                out["required"] = required
        elif isinstance(schema.get("additionalProperties"), dict):
            out["additionalProperties"] = structural(schema["additionalProperties"], defs)
            for key in ("minProperties", "maxProperties"):
                if key in schema:
                    out[key] = schema[key]
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out
    if kind == "array":
        out["type"] = "array"
        items = schema.get("items")
        if items is None and "prefixItems" in schema:
            converted = [structural(i, defs) for i in schema["prefixItems"]]
            items = schema["prefixItems"][0]
            if any(c != converted[0] for c in converted):
                raise ValueError(f"mixed tuple items are not structural: {schema}")
        out["items"] = structural(items or {}, defs)
        for key in ("minItems", "maxItems"):
            if key in schema:
                out[key] = schema[key]
        return out
    if "const" in schema:
        out["type"] = _json_type(schema["const"])
        out["enum"] = [schema["const"]]
        return out
    if kind in ("string", "integer", "number", "boolean"):
        out["type"] = kind
        for key in ("enum", "minimum", "maximum", "minLength", "maxLength", "pattern"):
            if key in schema:
                out[key] = schema[key]
        for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if key in schema:
                out[bound] = schema[key]
                out[key] = True
        return out
    if not schema or set(schema) <= {"description", "title"}:
        return {**out, "x-kubernetes-preserve-unknown-fields": True}
    raise ValueError(f"cannot express this schema node structurally: {schema}")


def _union(schema: dict[str, Any], members: list[dict[str, Any]], defs: dict[str, Any]) -> dict:
    """`X | None` -> nullable X; a discriminated union of objects -> one object of all keys."""
    nullable = any(m.get("type") == "null" for m in members)
    rest = [m for m in members if m.get("type") != "null"]
    if len(rest) == 1:
        out = structural(rest[0], defs)
    else:
        converted = [structural(m, defs) for m in rest]
        if all(c.get("type") == "object" and "properties" in c for c in converted):
            props: dict[str, Any] = {}
            for c in converted:
                for prop, sub in c["properties"].items():
                    if prop == "name":
                        names = props.get("name", {}).get("enum", [])
                        sub = {**sub, "enum": names + sub.get("enum", [])}
                    elif prop in props and props[prop] != sub:
                        sub = _merge_scalar(props[prop], sub, prop)
                    props[prop] = sub
            out = {"type": "object", "properties": props}
            if "name" in props:
                out["required"] = ["name"]
        else:
            # mixed scalars (an env kwarg may be a bool, a number or a string)
            out = {"x-kubernetes-preserve-unknown-fields": True}
    if nullable:
        out["nullable"] = True
    if "description" in schema:
        out["description"] = schema["description"]
    return out


def _merge_scalar(a: dict[str, Any], b: dict[str, Any], prop: str) -> dict[str, Any]:
    """The same key in two algorithms: same type required; bounds and text of the first."""
    strip = ("description", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum")
    core_a = {k: v for k, v in a.items() if k not in strip}
    core_b = {k: v for k, v in b.items() if k not in strip}
    if core_a != core_b:
        raise ValueError(f"algorithms disagree on the type of {prop!r}: {a} vs {b}")
    merged = dict(core_a)
    if "description" in a:
        merged["description"] = a["description"]
    if a.get("enum") and b.get("enum"):
        merged["enum"] = sorted(set(a["enum"]) | set(b["enum"]))
    return merged


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _clean(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _clean(v) for k, v in node.items() if k not in _DROP}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def spec_schema() -> dict[str, Any]:
    """The structural schema of `.spec`."""
    raw = ExperimentSpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    out = _clean(structural(raw, _cleaned_defs(defs), "ExperimentSpec"))
    for path, rules in RULES.items():
        node = out
        for part in path:
            node = node["properties"][part]
        node["x-kubernetes-validations"] = [dict(r) for r in rules]
    for key in ("resources", "placement"):  # keyed by component: the resolver checks the keys
        out["properties"][key]["maxProperties"] = len(COMPONENTS)
    quantities = out["properties"]["resources"]["additionalProperties"]["properties"]
    for prop, rule in QUANTITY_RULES.items():
        quantities[prop]["x-kubernetes-validations"] = [dict(rule)]
    out["properties"][PROFILE_KEY] = profile_schema()
    return out


def profile_schema() -> dict[str, Any]:
    """The structural schema of `.spec.profile`: the cluster profile, optional, key by key."""
    from surreal_kube.launch.kube.profile import ClusterProfile

    raw = ClusterProfile.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    out = _clean(structural(raw, _cleaned_defs(defs), "ClusterProfile"))
    out["description"] = (
        "The cluster profile this experiment runs with (the same keys as a --profile file: "
        "pools, experimentVolume, imagePullSecrets, ...). Each key given replaces the "
        "operator's value of that key; keys left out, or no profile at all, take the "
        "operator's (Helm value `profile`). `surreal-kube create --profile FILE` writes it whole."
    )
    return out


def _cleaned_defs(defs: dict[str, Any]) -> dict[str, Any]:
    return {name: dict(d) for name, d in defs.items()}


def status_schema() -> dict[str, Any]:
    """The structural schema of `.status` (written by the operator)."""
    raw = ExperimentStatus.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})
    return _clean(structural(raw, defs, "ExperimentStatus"))


def experiment_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition."""
    schema = {
        "type": "object",
        "description": "A distributed reinforcement-learning experiment run by surreal-kube.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                **spec_schema(),
                "description": "Everything a researcher decides about one experiment.",
            },
            "status": status_schema(),
        },
        "required": ["spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {
                "app.kubernetes.io/name": "surreal-kube",
                "app.kubernetes.io/part-of": "surreal-kube",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}, "scale": dict(SCALE)},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = (
    "# Generated by `python -m surreal_kube.launch.kube.render.crd` from the experiment spec\n"
    "# (surreal_kube/experiment/spec.py);\n"
    "# do not edit by hand (tests/operator/test_crd.py checks that it is current).\n"
)


def crd_yaml() -> str:
    """The CRD as the YAML file checked into operators/ and the Helm chart."""
    return HEADER + yaml.safe_dump(experiment_crd(), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(crd_yaml())
