"""Two operator replicas and a Lease (issue 27 item 5): one reconciles, the other takes over
when it dies, and what it finishes is what one operator alone would have made.

The Lease is a real `coordination.k8s.io/v1` object on the test API server; the replicas are
real operator processes (`--leader-elect`), as the chart's Deployment runs two."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.api.client import EXPERIMENT, Kube
from surreal_kube.launch.kube.profile import load_profile
from surreal_kube.launch.kube.render.custom_resource import experiment_object
from surreal_kube.launch.kube.render.objects import render_experiment
from surreal_kube.operator.leader import LEASE, LEASE_NAME, LeaderElection
from tests.operator.support import (
    APPLIED_KINDS,
    IMAGES,
    SPEC_IMAGES,
    TINY,
    Operator,
    connect,
    ensure_crd,
    names_of,
    normalized,
    objects_of,
    profile_file,
    wait_for,
)

pytestmark = pytest.mark.cluster

TINY_SETS = [a for a in TINY if a != "--set"]
AGENTS = ["agents.count=1000", "agents.batch=8"]  # 125 agent pods


def holder(kube: Kube) -> str | None:
    lease = kube.get_or_none(LEASE, LEASE_NAME, kube.namespace)
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


def test_one_holds_the_lease_and_another_takes_it_when_renewals_stop(
    kube_cluster: Any, kube_namespace: str
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    a = LeaderElection(kube, kube_namespace, "a", lease_seconds=2, renew_every=0.2)
    b = LeaderElection(kube, kube_namespace, "b", lease_seconds=2, renew_every=0.2)
    assert a.acquire()
    lost = threading.Event()
    a.keep(lost.set)
    give_up = threading.Event()
    threading.Timer(3.0, give_up.set).start()
    assert not b.acquire(give_up)  # renewed all along: never expired for b
    assert holder(kube) == "a" and not lost.is_set()
    a._stop.set()  # a stops renewing (its process frozen, say) without releasing
    assert b.acquire()
    assert holder(kube) == "b"
    lease = kube.get(LEASE, LEASE_NAME, kube_namespace)
    assert lease["spec"]["leaseTransitions"] == 1
    b.release()  # on purpose: the next replica need not wait for a whole lease
    c = LeaderElection(kube, kube_namespace, "c", lease_seconds=60, renew_every=0.2)
    assert c.acquire() and holder(kube) == "c"


def test_the_standby_finishes_a_create_the_leader_died_in(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    ensure_crd(kube)
    ns, name = kube_namespace, "exp-leader"
    profile = str(profile_file(tmp_path))
    exp = resolve_experiment(name, sets=[*SPEC_IMAGES, *TINY_SETS, *AGENTS])
    expected = render_experiment(exp, ns, images=IMAGES, profile=load_profile(profile))
    args = ("--profile", profile, "--leader-elect")
    first = Operator(kube_cluster, ns, tmp_path / "first.log", *args).start()
    second = None
    try:
        wait_for("the first replica to lead", lambda: holder(kube), timeout=60)
        leader = holder(kube)
        second = Operator(kube_cluster, ns, tmp_path / "second.log", *args).start()
        kube.apply(experiment_object(exp, ns))
        wait_for(
            "the leader's first objects",
            lambda: objects_of(kube, name, APPLIED_KINDS[:1]),
            every=0.005,
        )
        os.killpg(first.proc.pid, signal.SIGKILL)  # mid-create, holding the Lease
        first.stop(signal.SIGKILL)
        killed = time.monotonic()
        taken = wait_for("the standby to take the Lease", lambda: holder(kube) != leader)
        print(f"failover: the standby held the Lease {time.monotonic() - killed:.1f} s after")
        assert taken
        wait_for(
            "Running through the standby",
            lambda: (kube.get(EXPERIMENT, name).get("status") or {}).get("phase") == "Running",
            timeout=180,
        )
        made = {
            f"{o['kind']}/{o['metadata']['name']}": o for o in objects_of(kube, name, APPLIED_KINDS)
        }
        assert sorted(made) == sorted(names_of(expected))
        for obj in expected:  # each as one operator alone makes it: no second, different apply
            key = f"{obj['kind']}/{obj['metadata']['name']}"
            again = kube.apply(obj, ns, dry_run=True)  # what applying the plan now would change
            assert normalized(again) == normalized(made[key]), key
    except BaseException:
        for op in (first, second):
            if op is not None:
                print(f"--- {op.log}\n{op.tail()}")
        raise
    finally:
        for op in (first, second):
            if op is not None:
                op.stop()
