"""Shared test configuration: registers the control-plane plugin (tests/cluster/fixtures.py).

The user's own settings file (`surreal-kube registry`, ~/.config/surreal-kube/config.yaml) is
never read by the tests: a registry set there would change every rendered image name. The
session points $SURREAL_KUBE_CONFIG at a file that does not exist; tests that need settings
point it at their own.
"""

import importlib.util
import os
import signal
import tempfile

# `make test` runs the first tier in the background, where a non-interactive shell starts it
# with SIGINT ignored (and Python keeps it so): Ctrl-C then stopped the foreground tier and left
# this one running, its experiments and clusters with it. Restored, Ctrl-C interrupts it as it
# does a foreground run, fixtures tearing down what they started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = (
    ["tests.cluster.fixtures"] if importlib.util.find_spec("tests.cluster.fixtures") else []
)

os.environ["SURREAL_KUBE_CONFIG"] = os.path.join(
    tempfile.gettempdir(), f"surreal-kube-tests-{os.getpid()}-no-settings.yaml"
)
os.environ.pop("SURREAL_KUBE_REGISTRY", None)
