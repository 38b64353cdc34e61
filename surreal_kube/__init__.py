"""surreal-kube: a Kubernetes-native orchestrator for distributed reinforcement learning."""

__version__ = "0.1.0"
"""The one place the version is written: pyproject.toml reads it (setuptools' dynamic version),
the Helm chart's appVersion and the CHANGELOG's newest entry are checked against it
(tests/test_version.py)."""
