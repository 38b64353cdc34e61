"""The operator's Prometheus endpoint (issue 27 item 5): `curl /metrics` shows reconciles, the
refresher's queue and each experiment's phase and iteration, rising as its progress record does.

The record is written with the reporter ServiceAccount's own token, as tensorplex writes it in a
run (tests/launch/kube/reporter_support.py); the operator reads it on the test control plane."""

from __future__ import annotations

import re
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from surreal_kube.experiment import progress
from surreal_kube.launch.kube.status.summary import ExperimentStatus
from surreal_kube.operator.metrics import CONTENT_TYPE, Metrics, serve
from tests.launch.kube.reporter_support import write_progress
from tests.operator.support import (
    connect,
    ensure_crd,
    profile_file,
    running_operator,
    tiny_experiment,
    wait_for,
)


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as res:
        assert res.headers["Content-Type"] == CONTENT_TYPE
        return res.read().decode()


def scraped(address: str, series: str) -> float | None:
    """One series' value, None also while the operator is still starting its server."""
    try:
        return value(scrape(address), series)
    except OSError:  # connection refused: not listening yet
        return None


def value(text: str, series: str) -> float | None:
    """The value of one series (its name and labels exactly as exposed), or None."""
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_the_text_format_has_each_family_once_with_help_and_type() -> None:
    metrics = Metrics()
    metrics.reconciled("applied")
    metrics.reconciled("InvalidSpec")
    metrics.observed(
        "team-a",
        'exp "q"',
        ExperimentStatus(phase="Running", learner_iteration=7, eval_return=12.5),
    )
    server = serve(metrics, "127.0.0.1:0")
    try:
        host, port = server.server_address[:2]
        text = scrape(f"{host}:{port}")
    finally:
        server.shutdown()
    families = re.findall(r"^# TYPE (\S+) (counter|gauge)$", text, re.MULTILINE)
    assert len(families) == len({f for f, _ in families})
    assert all(f"# HELP {f} " in text for f, _ in families)
    assert value(text, 'surreal_operator_reconciles_total{outcome="applied"}') == 1
    labels = 'namespace="team-a",name="exp \\"q\\""'
    assert value(text, f'surreal_experiment_phase{{{labels},phase="Running"}}') == 1
    assert value(text, f'surreal_experiment_phase{{{labels},phase="Failed"}}') == 0
    assert value(text, f"surreal_experiment_learner_iteration{{{labels}}}") == 7
    assert value(text, f"surreal_experiment_env_steps{{{labels}}}") is None  # not reported yet


@pytest.mark.cluster
def test_curl_shows_the_experiments_iteration_rising(
    kube_cluster: Any, kube_namespace: str, tmp_path: Path
) -> None:
    kube = connect(kube_cluster, kube_namespace)
    ensure_crd(kube)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    name = "exp-metrics"
    labels = f'namespace="{kube_namespace}",name="{name}"'
    with running_operator(
        kube_cluster, kube_namespace, tmp_path, "--profile", str(profile_file(tmp_path)),
        "--metrics", address,
    ):  # fmt: skip
        kube.apply(tiny_experiment(kube_namespace, name))
        wait_for(
            "Running in /metrics",
            lambda: scraped(address, f'surreal_experiment_phase{{{labels},phase="Running"}}') == 1,
            timeout=120,
        )
        text = scrape(address)
        assert (value(text, 'surreal_operator_reconciles_total{outcome="applied"}') or 0) >= 1
        assert value(text, "surreal_operator_experiments") == 1
        for iteration in (3, 9):
            write_progress(
                kube_cluster, kube, name, kube_namespace, tmp_path,
                progress.Record(state="running", iteration=iteration, env_steps=100 * iteration),
            )  # fmt: skip
            series = f"surreal_experiment_learner_iteration{{{labels}}}"
            wait_for(
                f"iteration {iteration} in /metrics",
                lambda series=series, iteration=iteration: scraped(address, series) == iteration,
            )
