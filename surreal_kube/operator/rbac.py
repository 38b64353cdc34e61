"""The least privilege the operator needs, in one place.

The Helm chart's ClusterRole (charts/surreal-kube/templates/clusterrole.yaml) grants exactly these
rules, bound by a RoleBinding in each watched namespace only; tests/charts checks that they agree
and that every kind the renderer produces is covered. Node reading is separate and optional.
"""

from __future__ import annotations

from typing import Any

MANAGE = ["get", "list", "watch", "create", "patch", "update", "delete"]

RULES: list[dict[str, Any]] = [
    # its own objects: watch them, store kopf's progress annotations, write their status
    {
        "apiGroups": ["surreal.ai"],
        "resources": ["experiments"],
        "verbs": ["get", "list", "watch", "patch", "update"],
    },
    {
        "apiGroups": ["surreal.ai"],
        "resources": ["experiments/status"],
        "verbs": ["get", "patch", "update"],
    },
    # ownerReferences with blockOwnerDeletion (OwnerReferencesPermissionEnforcement)
    {"apiGroups": ["surreal.ai"], "resources": ["experiments/finalizers"], "verbs": ["update"]},
    # pods are created by the workloads; the operator only reads them for the status
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    # what the renderer produces
    {
        "apiGroups": [""],
        "resources": ["configmaps", "services", "persistentvolumeclaims"],
        "verbs": MANAGE,
    },
    {"apiGroups": ["apps"], "resources": ["statefulsets", "deployments"], "verbs": MANAGE},
    # the experiment's CURVE key, made at its first apply and read back at every later one
    # (launch/kube/lifecycle/keys.py): get and create only, never list, watch, patch or delete
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]},
    # each group's ingress boundary (render/templates/networkpolicy.yaml.j2)
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": MANAGE},
    # the stateful groups' disruption budgets (render/templates/poddisruptionbudget.yaml.j2)
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": MANAGE},
    # the reporter's Role lets tensorplex scale its own workloads to 0 at the end of the run
    # (runtime/conductor.py); the operator may grant that only if it holds it
    {
        "apiGroups": ["apps"],
        "resources": ["deployments/scale", "statefulsets/scale"],
        "verbs": ["patch"],
    },
    # the progress reporter's identity (<exp>-reporter). The API server lets the operator grant
    # only what it holds itself (no `escalate`, no `bind`): get/patch on its ConfigMaps, patch on
    # its workloads' scale.
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": MANAGE},
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": MANAGE,
    },
    # kopf reports handler outcomes as Events on the Experiment
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    # an experiment with a queue is one Kueue Workload (render/workload.py); its LocalQueue is
    # read for the queue's length in the status
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": MANAGE},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get"]},
]

LEASE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "patch"],
    },
]
"""In the operator's own namespace only (a Role there): the leader election's Lease."""

NODE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["scheduling.k8s.io"],
        "resources": ["priorityclasses"],
        "verbs": ["get", "list"],
    },
]
"""Cluster-wide and read-only: placement pre-flight (nodes, the profile's PriorityClasses) and
plain-words pending reasons."""


def allows(rules: list[dict[str, Any]], api_group: str, resource: str, verb: str) -> bool:
    """True if `rules` grant `verb` on `resource` in `api_group`."""
    return any(
        api_group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
        for r in rules
    )
