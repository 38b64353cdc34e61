"""Shared test configuration: registers the control-plane plugin (tests/cluster/fixtures.py)."""

import importlib.util

pytest_plugins = (
    ["tests.cluster.fixtures"] if importlib.util.find_spec("tests.cluster.fixtures") else []
)
