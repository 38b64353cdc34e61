"""Environments: gymnasium tasks behind a `gym:` prefix, with the experiment's wrappers.

Public API: `make_env`, `check_env`, `env_spaces`, `parse_env_id` (in `make`), the wrappers
(`wrappers`) and `VideoRecorder` (`video`).
"""

from surreal_kube.envs.make import check_env, env_spaces, make_env, parse_env_id

__all__ = ["check_env", "env_spaces", "make_env", "parse_env_id"]
