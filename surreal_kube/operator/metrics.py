"""The operator's Prometheus metrics: `GET /metrics` in the text exposition format (0.0.4).

What a platform team graphs and alerts on: reconciles and their outcomes, refresh errors, how
many experiments wait for a status refresh (the refresher's queue), and per experiment its
phase, learner iteration, env steps, env steps/s and last eval return, the figures the status
already holds (from each experiment's progress record, `launch/kube/status/progress.py`).

Written by hand rather than with prometheus_client: a dozen series, no histograms, and one
dependency fewer in the operator's image. Every value is read under one lock when scraped, so a
scrape never sees half of a refresh. Served by a daemon thread (`serve`); the chart's Service
and optional ServiceMonitor point Prometheus at it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from surreal_kube.launch.kube.status.summary import ExperimentStatus

log = logging.getLogger(__name__)

PHASES = ("Pending", "Queued", "Running", "Succeeded", "Failed")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PER_EXPERIMENT = (
    (
        "surreal_experiment_learner_iteration",
        "learner iteration last reported",
        "learner_iteration",
    ),
    ("surreal_experiment_env_steps", "environment steps of all agents", "env_steps"),
    (
        "surreal_experiment_env_steps_per_second",
        "environment steps per second of all agents, lately",
        "env_steps_per_second",
    ),
    ("surreal_experiment_eval_return", "mean return of the last evaluation", "eval_return"),
    ("surreal_experiment_restarts", "restarts of all the experiment's pods", "restarts"),
)


class Metrics:
    """The operator's counters and each experiment's last status, rendered on scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reconciles: dict[str, int] = {}
        self._refresh_errors = 0
        self._experiments: dict[tuple[str, str], ExperimentStatus] = {}
        self.queue_depth: Callable[[], int] = lambda: 0

    def reconciled(self, outcome: str) -> None:
        """One apply of an Experiment: applied, or why not (InvalidSpec, NotOurs, retry...)."""
        with self._lock:
            self._reconciles[outcome] = self._reconciles.get(outcome, 0) + 1

    def refresh_failed(self) -> None:
        with self._lock:
            self._refresh_errors += 1

    def observed(self, namespace: str, name: str, status: ExperimentStatus) -> None:
        """An experiment's status as the last refresh wrote it."""
        with self._lock:
            self._experiments[(namespace, name)] = status

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._experiments.pop((namespace, name), None)

    def render(self) -> str:
        """Every series, in the text exposition format."""
        with self._lock:
            reconciles = dict(self._reconciles)
            errors = self._refresh_errors
            experiments = dict(self._experiments)
        out: list[str] = []

        def family(name: str, kind: str, help_: str) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")

        family("surreal_operator_reconciles_total", "counter", "applies of Experiments, by outcome")
        for outcome, n in sorted(reconciles.items()):
            out.append(f"surreal_operator_reconciles_total{_labels(outcome=outcome)} {n}")
        family("surreal_operator_refresh_errors_total", "counter", "status refreshes that failed")
        out.append(f"surreal_operator_refresh_errors_total {errors}")
        family("surreal_operator_queue_depth", "gauge", "experiments waiting for a refresh")
        out.append(f"surreal_operator_queue_depth {self.queue_depth()}")
        family("surreal_operator_experiments", "gauge", "experiments the operator reports on")
        out.append(f"surreal_operator_experiments {len(experiments)}")
        family("surreal_experiment_phase", "gauge", "1 for the experiment's phase, else 0")
        for (ns, name), st in sorted(experiments.items()):
            for phase in PHASES:
                value = 1 if (st.phase or "Pending") == phase else 0
                out.append(
                    f"surreal_experiment_phase{_labels(namespace=ns, name=name, phase=phase)} "
                    f"{value}"
                )
        for metric, help_, field in _PER_EXPERIMENT:
            family(metric, "gauge", help_)
            for (ns, name), st in sorted(experiments.items()):
                value = getattr(st, field)
                if value is not None:
                    out.append(f"{metric}{_labels(namespace=ns, name=name)} {_number(value)}")
        return "\n".join(out) + "\n"


def _labels(**labels: str) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def serve(metrics: Metrics, address: str) -> ThreadingHTTPServer:
    """Serve `GET /metrics` on `address` (`HOST:PORT`; port 0: any free one) from a daemon
    thread; the server's `server_address` says where."""
    host, _, port = address.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics: " + format, *args)

    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
