"""`surreal-kube status NAME`: an experiment's processes and progress.

Where an experiment lives is one rule for every verb (kube_view.is_local); a name not found
says where it was looked for.
"""

from __future__ import annotations

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli import spec_options as so
from surreal_kube.cli.output import Output, names, out, structured, tidy


def status(
    name: so.Name,
    output: Output = None,
    local: so.LocalManaged = False,
    root: so.Root = None,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
    namespace: kv.Namespace = None,
) -> None:
    """Show each process of an experiment (state, restarts, pid or pod) and its progress.

    On a cluster: each component and pod (phase, restarts, node) and, for a pending pod, the
    scheduler's reason in plain words.

    Examples:

    \b
      surreal-kube status exp-ppo-ant --local
      surreal-kube status exp-ppo-ant -o json -n rl
    """
    if not kv.is_local(name, local, root, kubeconfig, context, namespace):
        _status_kube(name, kv.target(kubeconfig, context, namespace), output)
        return
    from surreal_kube.cli.local_view import render_state
    from surreal_kube.experiment.resolve import load_experiment_file
    from surreal_kube.launch.local import backend

    exp = backend.find(name, root)
    state = dict(exp.state)
    state["phase"] = exp.phase
    if output == "name":
        names([name])
        return
    if output:
        structured(tidy(state), output)
        return
    spec = load_experiment_file(exp.folder.config).spec
    out.print(
        render_state(
            state, max_env_steps=spec.session.max_env_steps, max_time=spec.session.max_time_seconds
        )
    )


def _status_kube(name: str, where: kv.Target, output: str | None) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from surreal_kube.launch.kube import naming
    from surreal_kube.launch.kube.api import watch as kube_watch
    from surreal_kube.launch.kube.lifecycle import observing
    from surreal_kube.launch.kube.status import progress as kube_progress

    kube = kv.connect(where, name)
    # three independent reads at once (the object, its pods, its progress): each is a round
    # trip, and a thousand pods are the longest answer
    with ThreadPoolExecutor(max_workers=2) as pool:
        pods = pool.submit(
            kube_watch.list_pods, kube, kube.namespace, naming.experiment_selector(name)
        )
        record = pool.submit(kube_progress.read, kube, name, kube.namespace)
        found = kv.find(kube, name)
        found.pods = pods.result()
        st = observing.status_of(kube, found)
        kube_progress.merge(st, record.result())
    if output == "name":
        names([name])
        return
    if output:
        doc = kv.status_json(st)
        doc["namespace"] = found.namespace
        doc["via"] = "operator" if found.via_operator else "direct"
        structured(tidy(doc), output)
        return
    via = "Experiment object, operator" if found.via_operator else "applied directly"
    out.print(kv.status_view(name, found.namespace, st, via), soft_wrap=True)
