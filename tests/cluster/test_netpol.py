"""NetworkPolicy enforced between real pods on the real node (kube-router's firewall,
tests/cluster/netpol.py): a client reaches a server, a policy denying the server's ingress
makes the same connection fail, one that admits the client's label lets it through again."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.node.support import finished_log, real_pod, wait_finished, wait_for, wait_running
from tests.operator.support import connect

pytestmark = [pytest.mark.cluster, pytest.mark.node]


def fetch_once(name: str, addr: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod that tries one HTTP GET of addr:8080 (5 s at most) and exits with its result."""
    return real_pod(
        name,
        ["sh", "-c", f'timeout 5 wget -q -O - "http://{addr}:8080/"; echo "rc=$?"'],
        labels=labels,
    )


def policy(name: str, ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def test_a_network_policy_denies_ingress_between_real_pods(
    policy_engine: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    token = uuid.uuid4().hex
    serve = f"mkdir -p /www && echo {token} > /www/index.html && exec httpd -f -p 8080 -h /www"
    kube.create(real_pod("web", ["sh", "-c", serve], labels={"app": "web"}, ports=[8080]))
    addr = wait_running(kube, "web")["status"]["podIP"]

    def outcome(name: str, labels: dict[str, str] | None = None) -> str:
        kube.create(fetch_once(name, addr, labels))
        wait_finished(kube, name)
        return finished_log(kube, name)

    # No policy: the connection succeeds.
    log = outcome("before")
    assert token in log and "rc=0" in log, log

    # Deny all ingress to the server: the firewall programs it, and the same GET fails.
    kube.create(policy("deny-web", []))
    wait_for(
        "kube-router's chain for the policy",
        lambda: (
            "KUBE-NWPLCY-" in policy_engine.iptables_rules()
            and addr in policy_engine.iptables_rules()
        ),
    )
    log = outcome("denied")
    assert token not in log and "rc=0" not in log, log

    # Admit pods labelled role=client: such a client gets through, an unlabelled one still not.
    kube.create(
        policy("allow-clients", [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])
    )
    wait_for(
        "kube-router's chains for both policies",
        lambda: policy_engine.iptables_rules().count(":KUBE-NWPLCY-") >= 2,
    )
    log = outcome("allowed", {"role": "client"})
    assert token in log and "rc=0" in log, log
    log = outcome("still-denied")
    assert token not in log and "rc=0" not in log, log


def test_the_rendered_boundary_admits_the_experiment_and_refuses_a_stranger(
    policy_engine: Any, kube_cluster: Any, kube_namespace: str
) -> None:
    """Issue 25 item 1 with a real engine: the NetworkPolicy `render` makes for an experiment's
    replay group, applied as rendered, lets a pod of the experiment reach the replay's collector
    port and refuses a pod of another experiment and an unlabelled one."""
    from surreal_kube.experiment.resolve import resolve_experiment
    from surreal_kube.launch.kube import naming
    from surreal_kube.launch.kube.render.objects import render_experiment
    from tests.operator.support import IMAGES

    kube = connect(kube_cluster, kube_namespace)
    exp = resolve_experiment("exp-wall")
    (boundary,) = [
        o
        for o in render_experiment(exp, kube_namespace, images=IMAGES)
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "exp-wall-replay"
    ]
    port = min(p["port"] for p in boundary["spec"]["ingress"][0]["ports"])
    token = uuid.uuid4().hex
    serve = f"mkdir -p /www && echo {token} > /www/index.html && exec httpd -f -p {port} -h /www"
    labels = {**naming.selector_labels("exp-wall", "replay"), naming.EXPERIMENT_LABEL: "exp-wall"}
    kube.create(real_pod("replay", ["sh", "-c", serve], labels=labels, ports=[port]))
    addr = wait_running(kube, "replay")["status"]["podIP"]
    kube.create(boundary)
    wait_for(
        "kube-router's chain for the rendered policy",
        lambda: addr in policy_engine.iptables_rules(),
    )

    def outcome(name: str, labels: dict[str, str] | None = None) -> str:
        fetch = f'timeout 5 wget -q -O - "http://{addr}:{port}/"; echo "rc=$?"'
        kube.create(real_pod(name, ["sh", "-c", fetch], labels=labels))
        wait_finished(kube, name)
        return finished_log(kube, name)

    ours = outcome("agent", {naming.EXPERIMENT_LABEL: "exp-wall"})
    assert token in ours and "rc=0" in ours, ours
    for name, labels in (("other-exp", {naming.EXPERIMENT_LABEL: "exp-other"}), ("stranger", None)):
        log = outcome(name, labels)
        assert token not in log and "rc=0" not in log, (name, log)
