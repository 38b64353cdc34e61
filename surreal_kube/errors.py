"""One error hierarchy for the whole package.

Each layer raises its own subclass; the boundaries (the CLI, the operator) convert them once into
exit codes or retry decisions, so no caller depends on a library's exceptions.
"""

from __future__ import annotations


class SurrealKubeError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code: int = 1


class SpecError(SurrealKubeError):
    """The experiment description is invalid: the user must change their input."""

    exit_code = 2


class InvalidNameError(SpecError):
    """An experiment name breaks the DNS-1035 rules or is too long for its derived names."""


class TopologyError(SurrealKubeError):
    """The process graph is inconsistent (an unbound endpoint, a port used twice)."""


class LaunchError(SurrealKubeError):
    """A backend could not start, find or stop an experiment."""


class RuntimeRoleError(SurrealKubeError):
    """A role process could not start (bad environment, unreachable peer)."""
