"""Fixtures for role tests: a local run whose processes are always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.harness import LocalRun


@pytest.fixture
def local_run(tmp_path: Path) -> Iterator[Callable[..., LocalRun]]:
    """`local_run(spec_overrides, algorithm=...)` -> a LocalRun, closed after the test."""
    runs: list[LocalRun] = []

    def make(spec: dict[str, Any] | None = None, **kwargs: Any) -> LocalRun:
        run = LocalRun(tmp_path, spec, **kwargs)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.close()
