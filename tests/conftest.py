"""Shared test configuration: registers the control-plane plugin (tests/cluster/fixtures.py).

The user's own settings file (`surreal-kube registry`, ~/.config/surreal-kube/config.yaml) is
never read by the tests: a registry set there would change every rendered image name. The
session points $SURREAL_KUBE_CONFIG at a file that does not exist; tests that need settings
point it at their own.
"""

import importlib.util
import os
import tempfile

pytest_plugins = (
    ["tests.cluster.fixtures"] if importlib.util.find_spec("tests.cluster.fixtures") else []
)

os.environ["SURREAL_KUBE_CONFIG"] = os.path.join(
    tempfile.gettempdir(), f"surreal-kube-tests-{os.getpid()}-no-settings.yaml"
)
os.environ.pop("SURREAL_KUBE_REGISTRY", None)
