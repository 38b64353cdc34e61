"""`surreal-kube-operator` (or `python -m surreal_kube.operator`): run the operator.

    surreal-kube-operator --namespace team-a --namespace team-b
    surreal-kube-operator --all-namespaces --kubeconfig ~/.kube/config --context gke

It needs the `operator` extra (kopf): `pip install 'surreal-kube[operator]'`.

In a pod (the Helm chart's Deployment) it uses its ServiceAccount; elsewhere the kubeconfig, as
the CLI does. With `--leader-elect` several replicas run and the holder of a Lease reconciles
(operator/leader.py); without it, one operator per set of namespaces.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="surreal-kube-operator",
        description="Reconcile surreal.ai Experiment objects into running experiments.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="namespace to watch (repeatable); default: the current context's namespace",
    )
    where.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument(
        "--learner-max-restarts",
        type=int,
        default=5,
        help="learner restarts after which an experiment is marked Failed (default 5)",
    )
    p.add_argument(
        "--resync",
        type=float,
        default=300.0,
        help="seconds between full re-reads of every experiment's objects and pods, a safety "
        "net: watch events drive recreation and status (default 300)",
    )
    p.add_argument(
        "--profile",
        help="cluster profile YAML (node pools, experiment volume, pull secrets), read once at "
        "start (the Helm chart mounts its value `profile` here); an Experiment's spec.profile "
        "keys replace its keys",
    )
    p.add_argument(
        "--no-read-nodes",
        action="store_true",
        help="do not read nodes (no placement pre-flight; pools only from --profile)",
    )
    p.add_argument(
        "--default-image",
        action="append",
        default=[],
        metavar="KEY=REF",
        help="image for experiments whose spec names a build under spec.images.KEY (repeatable)",
    )
    p.add_argument(
        "--default-queue",
        metavar="LOCALQUEUE",
        help="Kueue LocalQueue for experiments whose spec.queue is unset: each is admitted "
        "whole by Kueue or waits whole (default: none, experiments start at once)",
    )
    p.add_argument("--liveness", help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of the Lease "
        "surreal-kube-operator reconciles, the others wait to take over (operator/leader.py)",
    )
    p.add_argument(
        "--lease-namespace",
        help="namespace of the Lease (default: $POD_NAMESPACE, the chart sets it to the "
        "release's; else the first watched namespace)",
    )
    p.add_argument(
        "--metrics",
        type=metrics_address,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 0.0.0.0:8081 (the "
        "Helm chart's default); unset: none",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p.parse_args(argv)


def metrics_address(text: str) -> str:
    """`HOST:PORT` for --metrics (argparse says what is wrong, exit 2, before anything starts)."""
    _, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT (a port 0-65535), e.g. 0.0.0.0:8081 or 127.0.0.1:9090"
        )
    return text


def parse_images(pairs: Sequence[str]) -> dict[str, str]:
    """["cpu=repo:tag"] -> {"cpu": "repo:tag"}; empty references are skipped (Helm defaults)."""
    from surreal_kube.errors import SpecError

    out = {}
    for pair in pairs:
        key, sep, ref = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--default-image {pair!r}: expected KEY=REF, e.g. cpu=repo:tag")
        if ref.strip():
            out[key.strip()] = ref.strip()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.log_level != "debug":  # kopf logs every handler run at INFO
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    try:
        import kopf
    except ImportError:
        print(
            "error: the operator needs kopf, which the `operator` extra installs: "
            "pip install 'surreal-kube[operator]'",
            file=sys.stderr,
        )
        return 2

    from surreal_kube.errors import SurrealKubeError
    from surreal_kube.launch.kube.api import slim
    from surreal_kube.launch.kube.api.client import NODE, Kube
    from surreal_kube.launch.kube.profile import load_profile
    from surreal_kube.operator import handlers
    from surreal_kube.operator.config import FIELD_MANAGER, Config
    from surreal_kube.operator.loops import Refresher, Resyncer
    from surreal_kube.operator.nodecache import NodeCache
    from surreal_kube.operator.podcache import PodCache
    from surreal_kube.operator.podwatch import PodWatcher, Watcher

    try:
        kube = Kube(
            kubeconfig=args.kubeconfig,
            context=args.context,
            field_manager=FIELD_MANAGER,
        )
        config = Config(
            learner_max_restarts=args.learner_max_restarts,
            resync_seconds=args.resync,
            profile=load_profile(args.profile) if args.profile else None,
            read_nodes=not args.no_read_nodes,
            default_images=parse_images(args.default_image),
            default_queue=args.default_queue,
            nodes=None if args.no_read_nodes else NodeCache(),
        )
    except SurrealKubeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    namespaces = [] if args.all_namespaces else (args.namespace or [kube.namespace])
    registry = handlers.register(kopf.OperatorRegistry())
    pods = PodCache()
    watched = None if args.all_namespaces else namespaces
    memo = kopf.Memo(
        kube=kube,
        config=config,
        pods=pods,
        refresher=Refresher(kube, config, pods=pods),
        resyncer=Resyncer(kube, config, watched, pods=pods),
    )
    config.metrics.queue_depth = memo.refresher.waiting
    if args.metrics:
        from surreal_kube.operator.metrics import serve

        try:
            server = serve(config.metrics, args.metrics)
        except OSError as exc:  # taken, or no such address here: nothing has started yet
            print(f"error: --metrics {args.metrics}: cannot listen there: {exc}", file=sys.stderr)
            return 2
        logging.getLogger("surreal_kube.operator").info(
            "metrics at http://%s:%d/metrics", *server.server_address[:2]
        )
    memo.podwatch = PodWatcher(
        kube, watched, lambda kind, pod: handlers.pod_changed(memo, kind, pod)
    )
    memo.childwatches = handlers.watch_children(memo, watched)
    nodes = config.nodes
    memo.nodewatch = (
        None
        if nodes is None
        else Watcher(
            kube,
            NODE,
            None,
            nodes.observe,
            on_list=nodes.replace,
            decode=(slim.node_list, slim.node_event),
        )
    )
    logging.getLogger("surreal_kube.operator").info(
        "watching %s (context %s, server %s)",
        "all namespaces" if args.all_namespaces else ", ".join(namespaces),
        kube.context,
        kube.server,
    )
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    election = None
    lost = threading.Event()
    if args.leader_elect:
        from surreal_kube.operator.leader import LeaderElection, standby_health

        lease_ns = args.lease_namespace or os.environ.get("POD_NAMESPACE") or namespaces[0]
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        election = LeaderElection(kube, lease_ns, identity)
        with standby_health(args.liveness):  # alive while it waits: kopf is not serving yet
            election.acquire()

        def on_lost() -> None:  # stop reconciling before another replica may start
            lost.set()
            os.kill(os.getpid(), signal.SIGTERM)

        election.keep(on_lost)
    kopf.run(
        registry=registry,
        memo=memo,
        standalone=True,
        clusterwide=args.all_namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness,
    )
    if election is not None:
        if lost.is_set():
            return 1  # restarted as a standby by its Deployment
        election.release()
    return 0
