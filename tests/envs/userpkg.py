"""A throwaway user project with its own gymnasium environment, written where a test says.

The project is what a user of surreal-kube has: a `pyproject.toml` (or only a `requirements.txt`)
and a package whose `envs` module registers `Tiny-v0` when imported, so that the id
`gym:<package>.envs:Tiny-v0` (gymnasium's `module:id` form) names it. The environment is small and
deterministic: a 3-float observation, two discrete actions, reward 1 for action 1, 20 steps.
"""

from __future__ import annotations

from pathlib import Path

ENVS_PY = '''"""Environments of {package}: importing this module registers them with gymnasium."""

import gymnasium as gym
import numpy as np


class Tiny(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, dtype=np.float32), {{}}

    def step(self, action):
        self.t += 1
        obs = np.full(3, self.t / 20.0, dtype=np.float32)
        return obs, float(action), self.t >= 20, False, {{}}


gym.register(id="Tiny-v0", entry_point=Tiny)
'''

PYPROJECT = """[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{package}"
version = "0.0.1"
dependencies = []

[tool.setuptools.packages.find]
include = ["{package}*"]
"""


def write_user_project(root: Path, package: str = "mypkg", *, pyproject: bool = True) -> Path:
    """Write the project under `root` (created); returns `root`. Its env id: `env_id(package)`."""
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f'"""{package}: a user project."""\n')
    (pkg / "envs.py").write_text(ENVS_PY.format(package=package))
    if pyproject:
        (root / "pyproject.toml").write_text(PYPROJECT.format(package=package))
    else:
        (root / "requirements.txt").write_text("# nothing beyond what surreal-kube brings\n")
    return root


def env_id(package: str = "mypkg") -> str:
    """The experiment's env id for the project's environment."""
    return f"gym:{package}.envs:Tiny-v0"
