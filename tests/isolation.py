"""Run a test body in a fresh interpreter.

MuJoCo's EGL renderer loads Mesa's LLVM into the process; torch, when it first creates an
optimizer, imports triton, whose own LLVM then crashes the interpreter (a segfault, taking the
whole pytest session with it). Tests that render therefore run their body in a spawned child;
assertion errors come back to the parent with their message.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


def run_isolated(func: Callable[..., Any], *args: Any) -> Any:
    """Call module-level `func(*args)` in a new interpreter and return its (picklable) result."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(func, args)
