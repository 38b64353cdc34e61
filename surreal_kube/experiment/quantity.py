"""Kubernetes resource quantities (`500m`, `2`, `512Mi`, `4G`) as numbers, and back to text.

Placement compares what a component asks for with what a node pool offers, and status compares
what a pod asks for with what a node has free, so every side must be read the way the API server
reads them: this module is the only place that knows the suffixes.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from math import ceil
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(
    r"^([+]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)$"
)


def parse_quantity(text: str | int | float) -> Decimal:
    """Value of a Kubernetes quantity; raises ValueError naming the valid forms."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(
            f"{text!r} is not a Kubernetes quantity (examples: 500m, 2, 1.5, 512Mi, 4Gi)"
        )
    number, suffix = match.groups()
    try:
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation as exc:  # pragma: no cover - regex guards this
        raise ValueError(f"{text!r} is not a number") from exc


def parse_cpu(text: str | int | float) -> float:
    """CPU cores as a float (`500m` -> 0.5)."""
    value = parse_quantity(text)
    if value <= 0:
        raise ValueError(f"cpu must be > 0, got {text!r}")
    return float(value)


def parse_memory(text: str | int | float) -> int:
    """Memory in bytes (`512Mi` -> 536870912)."""
    value = parse_quantity(text)
    if value <= 0:
        raise ValueError(f"memory must be > 0, got {text!r}")
    if str(text).strip()[-1:] == "m":
        raise ValueError(f"memory in millibytes makes no sense, got {text!r}; use Mi or Gi")
    return int(value)


def parse_amount(text: str | int | float) -> float:
    """Any quantity the cluster reports, as a float: cores for cpu, bytes for memory, a count.

    What the cluster reports may be zero (a real kubelet's `hugepages-2Mi: "0"`, a container
    requesting `cpu: "0"`): that is a quantity to count, not a spec to refuse, so it is read
    with `parse_quantity` rather than the spec's positive-only parsers.
    """
    return float(parse_quantity(str(text)))


def to_millicpu(text: str) -> int:
    """`500m` -> 500, `2` -> 2000 (rounded up, as the API server rounds requests)."""
    return ceil(round(parse_cpu(text) * 1000, 6))


BINARY_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
"""The binary suffixes, largest first: how sizes are written back (`4Gi`, `512Mi`)."""


def format_cpu(millicpu: int) -> str:
    """2000 -> `2`, 500 -> `500m`: the shortest exact Kubernetes quantity."""
    return str(millicpu // 1000) if millicpu % 1000 == 0 else f"{millicpu}m"


def format_memory(size: int) -> str:
    """The shortest exact binary quantity: 4294967296 -> `4Gi`, 1000 -> `1000`."""
    for suffix, factor in BINARY_UNITS:
        if size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


def _as_text(value: Any) -> Any:
    """Quantities may be written as bare numbers (`cpu: 2`); they are kept as text."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _valid_cpu(value: str) -> str:
    parse_cpu(value)
    return value


def _valid_memory(value: str) -> str:
    parse_memory(value)
    return value


CpuQuantity = Annotated[str, BeforeValidator(_as_text), AfterValidator(_valid_cpu)]
"""A pydantic field type: CPU as a Kubernetes quantity, validated, kept as written."""
MemoryQuantity = Annotated[str, BeforeValidator(_as_text), AfterValidator(_valid_memory)]
"""A pydantic field type: memory as a Kubernetes quantity, validated, kept as written."""
