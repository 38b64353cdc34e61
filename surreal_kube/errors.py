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


class CapacityError(SpecError):
    """The cluster, as its node pools are now, has no room for the experiment. For a person at
    `create` that is bad input like any other (exit 2, one line); for the operator it is a state
    that passes (the autoscaler adds a node, an experiment ends), so it retries with the reason in
    the status instead of giving up."""


class InvalidNameError(SpecError):
    """An experiment name breaks the DNS-1035 rules or is too long for its derived names."""


class TopologyError(SurrealKubeError):
    """The process graph is inconsistent (an unbound endpoint, a port used twice)."""


class LaunchError(SurrealKubeError):
    """A backend could not start, find or stop an experiment."""


class RuntimeRoleError(SurrealKubeError):
    """A role process could not start (bad environment, unreachable peer)."""
