"""Status counts a process's replacements into the group its pods' component label names, not
into one parsed back out of the process's name."""

from __future__ import annotations

from surreal_kube.launch.kube.status.summary import summarize
from tests.launch.kube.test_lifecycle_status import DESIRED, EXP, pod, running_set


def test_a_replacement_counts_into_the_group_its_pods_label_names() -> None:
    pods = running_set()
    # a workload whose name says nothing of its group: only the label does
    pods[1] = pod("custom-def-1", "replay", replicaset="custom-def")
    records = {"custom": {"count": 2, "uids": ["a", "b"]}}
    st = summarize(experiment=EXP, desired=DESIRED, pods=pods, replacements=records)
    assert st.components["replay"].restarts == 2
    assert st.processes["custom-def-1"].restarts == 2


def test_a_process_whose_pod_is_away_still_counts() -> None:
    # a StatefulSet deletes a failed pod before it creates the new one of the same name
    pods = [p for p in running_set() if p["metadata"]["name"] != "exp-a-agents-1"]
    records = {
        "exp-a-agents-1": {"count": 3, "uids": ["a", "b", "c"]},
        "exp-a-learner": {"count": 1, "uids": ["d"]},
    }
    st = summarize(experiment=EXP, desired=DESIRED, pods=pods, replacements=records)
    assert st.components["agents"].restarts == 3 and st.learner_restarts == 1
    assert st.restarts == 4


def test_another_experiments_records_count_nowhere() -> None:
    records = {"exp-b-agents-0": {"count": 5, "uids": ["a"]}, "exp-b-learner": {"count": 1}}
    st = summarize(experiment=EXP, desired=DESIRED, pods=running_set(), replacements=records)
    assert st.restarts == 2  # exp-a-agents-1's own two container restarts
