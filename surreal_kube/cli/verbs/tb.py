"""`surreal-kube tb NAME`: find or start the experiment's TensorBoard and print its URL."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import info, result


def tb(
    name: so.Name,
    port: Annotated[
        int | None,
        typer.Option("--port", metavar="PORT", help="Local port.", show_default=False),
    ] = None,
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Find or start the experiment's TensorBoard and print its URL.

    Local: the running experiment's TensorBoard, else one started on its folder (it keeps
    running; `delete` stops it). On a cluster: port-forward through the API server to the
    experiment's TensorBoard pod, print the local URL and keep forwarding until Ctrl-C or SIGTERM
    (both exit 0).

    Examples:

    \b
      surreal-kube tb exp-ppo-ant --local
      surreal-kube tb exp-ppo-ant --port 6006 -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        _tb_kube(name, kv.target(kubeconfig, context, namespace), port)
        return
    from surreal_kube.launch.local import backend

    result(backend.tensorboard(backend.find(name, root), port) + "\n")


def _tb_kube(name: str, where: kv.Target, port: int | None) -> None:
    from surreal_kube.experiment.topology import ENDPOINTS
    from surreal_kube.launch.kube.api.portforward import Forwarder
    from surreal_kube.launch.kube.lifecycle import pods

    kube = kv.connect(where, name)
    found = kv.find(kube, name)
    pod = pods.find_pod(kube, found.exp, found.namespace, "tensorboard")
    remote = ENDPOINTS["tensorboard"].port
    with Forwarder(kube, found.namespace, pod.pod, remote, local_port=port or 0) as fwd:
        info(f"forwarding {fwd.url} -> {pod.pod}:{remote} (Ctrl-C to stop)")
        result(fwd.url + "\n")
        with contextlib.suppress(KeyboardInterrupt):
            fwd.wait()
