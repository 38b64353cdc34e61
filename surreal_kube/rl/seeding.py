"""Seeds that never collide, and random-number states that survive a checkpoint.

Every environment an agent steps gets its own seed, derived from (experiment seed, role, agent or
evaluator index, environment index, restart count) by numpy's `SeedSequence`, which hashes the
whole tuple: two environments of one agent explore with different noise, and an agent restarted
after a crash does not replay the exploration of its previous life. Adding offsets (`seed + i`)
instead lets agent 1's env 0 collide with agent 0's env 1, which is what the previous scheme did.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch

Purpose = Literal["train", "eval"]
_PURPOSE = {"train": 0, "eval": 1}


def slot_seeds(
    experiment_seed: int,
    index: int,
    env_index: int = 0,
    restarts: int = 0,
    purpose: Purpose = "train",
) -> tuple[int, int]:
    """(environment seed, actor seed) of one environment slot, both in [0, 2**31).

    The environment seed goes to `env.reset(seed=...)` and the action space; the actor seed to the
    actor's own generator (exploration noise, sampling). They are two words of one hash, so they
    are independent of each other and of every other slot.
    """
    for name, value in (("index", index), ("env_index", env_index), ("restarts", restarts)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    words = np.random.SeedSequence(
        [int(experiment_seed), _PURPOSE[purpose], int(index), int(env_index), int(restarts)]
    ).generate_state(2)
    return int(words[0]) % 2**31, int(words[1]) % 2**31


def torch_rng_state(device: torch.device) -> dict[str, Any]:
    """The torch generators a learner draws from (CPU, and the CUDA device it runs on)."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_torch_rng_state(state: dict[str, Any] | None, device: torch.device) -> None:
    """Restore what `torch_rng_state` saved (a checkpoint without it leaves the generators)."""
    if not state:
        return
    if "cpu" in state:
        torch.set_rng_state(state["cpu"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
