"""When a run has ended: the one rule of both backends.

Locally the supervisor decides it (launch/local/supervisor.py), on Kubernetes tensorplex's
conductor (runtime/conductor.py); neither may import the other, so the rule lives here, below
both. What each counts differs (the supervisor sums the agents' status files and its own
monotonic clock; the conductor the agents' metrics, the learner's global count and a clock kept
over tensorplex's restarts), the decision and its words do not: `status`, the results and the
operator show the reason as these functions say it.

- The budget: env steps >= `session.maxEnvSteps` (or every agent process saying it took its
  share), or the seconds run >= `session.maxTimeSeconds`, whichever comes first. No budget set:
  the run never ends by itself.
- The final evaluation then gets one evaluation interval (the conductor's wait for the next one)
  plus FINAL_EVAL_TIMEOUT.
- A learner that died after LEARNER_MAX_RESTARTS restarts fails the run.
"""

from __future__ import annotations

from surreal_kube.experiment.spec import SessionSpec

LEARNER_MAX_RESTARTS = 5
"""Restarts of a learner after which its next death fails the run, in both backends (the kube
status counts a learner container's restarts against it, and it is the operator's default). With
the kubelet's crash back-off (10 s doubling to 5 min) that is about 5 minutes of trying: long
enough for a passing fault (an API server or a node blip, one OOM kill), short enough that a
learner that crashes at every start (a bad spec, a missing module) does not hold GPUs for hours."""
FINAL_EVAL_TIMEOUT = 120.0
"""Seconds the evaluators may take over the final evaluation before the run ends without it."""


def budget_reached(
    session: SessionSpec, *, env_steps: int, elapsed: float | None, agents_done: bool = False
) -> str | None:
    """Why the run should end now, or None.

    env_steps: the env steps of all agents together, as the backend counts them.
    elapsed: seconds the run has run on a monotonic clock, earlier runs included (None: unknown
        yet, which never ends a run).
    agents_done: every agent process said it took its share of the steps (the conductor's
        figure of the steps may lag behind theirs).
    """
    steps = session.max_env_steps
    if steps is not None and (env_steps >= steps or agents_done):
        return f"reached {steps} env steps"
    limit = session.max_time_seconds
    if limit is not None and elapsed is not None and elapsed >= limit:
        return f"reached {limit:g} s of wall time"
    return None


def learner_failed(
    restarts: int, last_exit: str, max_restarts: int = LEARNER_MAX_RESTARTS
) -> str | None:
    """Why the run failed when its learner died again after `restarts` restarts (`last_exit`:
    how it died), or None: restart it."""
    if restarts >= max_restarts:
        return f"learner exhausted its {max_restarts} restarts (last: {last_exit})"
    return None
