"""The base model every part of the experiment spec derives from.

The spec is a Kubernetes custom resource, so its keys are lowerCamelCase on the wire while the
Python attributes stay snake_case; unknown keys are refused so that a typo never passes silently.
Models are frozen: what is derived from a resolved experiment (its topology, the plan) is computed
once and can never disagree with a spec changed in place afterwards; a variant is a
`model_copy(update=...)`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """Strict, camelCase-aliased pydantic model (see module docstring)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        frozen=True,
        use_attribute_docstrings=False,
    )
