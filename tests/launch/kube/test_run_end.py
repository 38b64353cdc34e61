"""How a run's end reads on a cluster, without one: Succeeded with no pods, Failed with the reason.

Pods are plain dicts shaped like the API server's (a kubelet's CrashLoopBackOff status as
`kubectl get pod -o json` prints it); tests/launch/kube/test_run_end_cluster.py runs the whole end
against the real API server.
"""

from __future__ import annotations

from typing import Any

from surreal_kube.experiment import progress
from surreal_kube.launch.kube.status import progress as kube_progress
from surreal_kube.launch.kube.status.summary import LEARNER_MAX_RESTARTS, summarize

EXP = "exp-a"
DESIRED = {"learner": 1, "agents": 1}
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/bin/surreal-kube-role", line 8, in <module>\n'
    "ModuleNotFoundError: No module named 'mujoco'\n"
)


def pod(name: str, group: str, statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "app.kubernetes.io/component": group,
                "app.kubernetes.io/instance": EXP,
                "surreal.ai/experiment": EXP,
            },
        },
        "spec": {"nodeName": "cpu-pool-0", "containers": [{"name": group}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False" if statuses else "True"}],
            "containerStatuses": statuses or [{"name": group, "ready": True, "restartCount": 0}],
        },
    }


def crashing(restarts: int, exit_code: int = 1, message: str | None = TRACEBACK) -> dict:
    """The learner container as a kubelet reports it between two crashes."""
    terminated: dict[str, Any] = {"exitCode": exit_code, "reason": "Error"}
    if message is not None:
        terminated["message"] = message
    return {
        "name": "learner",
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}},
        "lastState": {"terminated": terminated},
    }


def test_a_learner_that_cannot_run_fails_the_experiment_with_its_last_log_line() -> None:
    pods = [pod("exp-a-learner-x-1", "learner", [crashing(5)]), pod("exp-a-agents-0", "agents")]
    st = summarize(experiment=EXP, desired=DESIRED, pods=pods)
    assert st.phase == "Failed"
    assert st.reason == (
        "the learner cannot run: container learner restarted 5 times, last exit code 1: "
        "ModuleNotFoundError: No module named 'mujoco'"
    )
    # no termination message: the kubelet's reason instead
    st = summarize(
        experiment=EXP, desired=DESIRED, pods=[pod("l", "learner", [crashing(6, 137, None)])]
    )
    assert st.reason == (
        "the learner cannot run: container learner restarted 6 times, last exit code 137: Error"
    )


def test_fewer_restarts_or_a_clean_exit_is_not_a_failure() -> None:
    assert LEARNER_MAX_RESTARTS == 5
    early = summarize(experiment=EXP, desired=DESIRED, pods=[pod("l", "learner", [crashing(4)])])
    assert early.phase == "Pending" and "keeps crashing (restarted 4 times)" in (early.reason or "")
    clean = summarize(
        experiment=EXP, desired=DESIRED, pods=[pod("l", "learner", [crashing(9, exit_code=0)])]
    )
    assert clean.phase == "Pending"
    # an agent crashing is the agent's trouble, not the experiment's end
    agent = crashing(9)
    agent["name"] = "agents"
    st = summarize(
        experiment=EXP,
        desired=DESIRED,
        pods=[pod("exp-a-learner-x-1", "learner"), pod("exp-a-agents-0", "agents", [agent])],
    )
    assert st.phase == "Pending"
    # the operator's own bound applies where it was set
    st = summarize(
        experiment=EXP,
        desired=DESIRED,
        pods=[pod("l", "learner", [crashing(2)])],
        learner_max_restarts=2,
    )
    assert st.phase == "Failed"


def test_a_finished_run_without_pods_is_succeeded_not_broken() -> None:
    st = summarize(experiment=EXP, desired=DESIRED, pods=[])
    assert st.phase == "Pending"  # from the pods alone: nothing runs
    record = progress.Record(
        state="finished", reason="reached 4000 env steps", last_return=187.25, iteration=40
    )
    kube_progress.merge(st, record)
    assert st.phase == "Succeeded"
    assert st.reason == (
        "finished: reached 4000 env steps; final return 187.25; compute released (no pods)"
    )
    assert st.eval_return == 187.25 and st.learner_iteration == 40
    # while the pods go away it says so
    st = summarize(experiment=EXP, desired=DESIRED, pods=[pod("exp-a-agents-0", "agents")])
    kube_progress.merge(st, record)
    assert st.reason is not None and st.reason.endswith("releasing compute (1 pods left)")
    assert all(not c.pending for c in st.components.values())


def test_the_operator_holds_every_right_the_reporters_role_grants() -> None:
    """The API server lets the operator create a Role granting only what it holds itself: the
    reporter's scale rights must be among the operator's (else applying the experiment fails)."""
    from surreal_kube.experiment.resolve import resolve_experiment
    from surreal_kube.launch.kube.render.objects import render_experiment
    from surreal_kube.operator import rbac
    from tests.launch.kube.specs import IMAGES

    exp = resolve_experiment("exp-rbac", sets=["evals.count=1"])
    (role,) = [o for o in render_experiment(exp, "rl", images=IMAGES) if o["kind"] == "Role"]
    granted = {
        (group, res, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("apps", "deployments/scale", "patch") in granted
    assert ("apps", "statefulsets/scale", "patch") in granted
    for group, res, verb in granted:
        assert rbac.allows(rbac.RULES, group, res, verb), (group, res, verb)
