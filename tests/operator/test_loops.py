"""The operator's background threads (operator/loops.py): the status refresher's pace."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from surreal_kube.operator import loops, status
from surreal_kube.operator.config import Config


def test_a_costly_status_refresh_spaces_out_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh that took c CPU seconds is followed by the next no sooner than c / share:
    at 1,000 pods the status refreshes had the operator busiest while the cluster created the
    pods, refreshing twice a second whatever one cost."""
    done: list[float] = []
    refreshed = threading.Event()

    def costly_refresh(*_: Any) -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.05:  # 50 ms of CPU: the next waits >= 1 s
            pass
        done.append(time.monotonic())
        refreshed.set()

    monkeypatch.setattr(status, "refresh", costly_refresh)
    config = Config(refresh_delay=0.01, refresh_cpu_share=0.05)
    refresher = loops.Refresher(None, config)  # type: ignore[arg-type]
    try:
        refresher.poke("ns", "exp")
        assert refreshed.wait(10)
        refreshed.clear()
        refresher.poke("ns", "exp")
        assert not refreshed.wait(0.5), "refreshed again after 0.5 s, not after >= 1 s"
        assert refreshed.wait(10), "the second poke was never served"
        assert done[1] - done[0] >= 1.0
    finally:
        refresher.stop()
        refresher.poke("ns", "exp")  # wakes the worker, which sees the stop and exits
