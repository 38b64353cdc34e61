"""`python -m surreal_kube.operator.smoke`: the chart's `helm test`, a tiny Experiment to its end.

    helm test sk -n rl --timeout 20m

The chart's test pod (templates/tests/smoke.yaml) runs this with a ServiceAccount that may only
create, read and delete Experiments in one namespace. It proves what a user needs after
`helm install`: the CRD is served, the operator reconciles, its default image runs an experiment's
pods on this cluster's nodes, and the learner, agents and evals reach `Succeeded` with a return.

The Experiment is built the way `surreal-kube config` builds one (PPO on CartPole, one agent, one
eval, a small step budget) and carries the label `surreal.ai/helm-test`, so that a test killed
half-way can be recognised and replaced by the next one, while an Experiment of the same name that
is not a test's is never touched. Whatever the outcome (success, failure, timeout, SIGTERM from
the pod's deletion) the Experiment is deleted before the process exits, and the operator's
garbage collection removes its pods.

Exit status: 0 the experiment succeeded; 1 it failed or did not end in time (the last status is
printed); 2 bad input (a resource map that does not parse, a name the spec refuses).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from surreal_kube.errors import SpecError, SurrealKubeError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.api.client import EXPERIMENT, Kube
from surreal_kube.launch.kube.render.custom_resource import experiment_object

TEST_LABEL = "surreal.ai/helm-test"
"""Marks an Experiment made by this test (its value: the release that ran it)."""

ENDED = ("Succeeded", "Failed")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m surreal_kube.operator.smoke",
        description="Run one tiny Experiment through the operator to its end (the chart's "
        "`helm test`), then delete it.",
    )
    p.add_argument("--name", required=True, help="the Experiment's name")
    p.add_argument("--namespace", "-n", help="its namespace (default: the pod's own)")
    p.add_argument("--release", default="", help="the Helm release, recorded in the label")
    p.add_argument("--env", default="gym:CartPole-v1", help="environment (default %(default)s)")
    p.add_argument(
        "--max-env-steps", type=int, default=10_000, help="step budget (default %(default)s)"
    )
    p.add_argument("--num-evals", type=int, default=1, help="eval processes (default 1)")
    p.add_argument(
        "--resources",
        default="{}",
        help='per-component requests as JSON, e.g. {"learner": {"cpu": "500m", "memory": '
        '"2Gi"}} (the chart\'s helmTest.resources); unset components keep their defaults',
    )
    p.add_argument(
        "--timeout", type=float, default=900.0, help="seconds to wait for the end (default 900)"
    )
    p.add_argument(
        "--poll", type=float, default=5.0, help="seconds between status reads (default 5)"
    )
    p.add_argument("--kubeconfig", help="kubeconfig (default: in a pod its ServiceAccount)")
    p.add_argument("--context", help="kubeconfig context")
    return p.parse_args(argv)


def smoke_object(
    name: str,
    namespace: str,
    *,
    release: str,
    env: str,
    max_env_steps: int,
    num_evals: int,
    resources: Mapping[str, Any],
) -> dict[str, Any]:
    """The test's Experiment, resolved and validated as `surreal-kube config` would."""
    exp = resolve_experiment(
        name,
        flags={
            "algorithm.name": "ppo",
            "env.id": env,
            "agents.count": 1,
            "evals.count": num_evals,
            "session.maxEnvSteps": max_env_steps,
            "resources": dict(resources) or None,
        },
    )
    obj = experiment_object(exp, namespace)
    obj["metadata"].setdefault("labels", {})[TEST_LABEL] = release or "true"
    return obj


def parse_resources(text: str) -> dict[str, Any]:
    """--resources: a JSON object of component -> requests (SpecError naming what is wrong)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"--resources: not JSON ({exc.msg} at char {exc.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise SpecError(f"--resources: expected a JSON object of components, got {text!r}")
    return value


def clear_leftover(kube: Kube, name: str, namespace: str, say: Callable[[str], None]) -> None:
    """Delete an Experiment an earlier, killed test left; refuse one that is not a test's."""
    old = kube.get_or_none(EXPERIMENT, name, namespace)
    if old is None:
        return
    if TEST_LABEL not in (old["metadata"].get("labels") or {}):
        raise SpecError(
            f"Experiment {namespace}/{name} exists and is not a helm test's (no label "
            f"{TEST_LABEL}); it is left alone: set helmTest.name to another name"
        )
    say(f"deleting Experiment {namespace}/{name}, left by an earlier test")
    kube.delete(EXPERIMENT, name, namespace)
    wait_gone(kube, name, namespace, timeout=300)


def wait_gone(kube: Kube, name: str, namespace: str, timeout: float) -> bool:
    """Poll until the Experiment is gone (its finalizer lets the operator clean up first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if kube.get_or_none(EXPERIMENT, name, namespace) is None:
            return True
        time.sleep(2)
    return False


def describe_status(status: Mapping[str, Any]) -> str:
    """One line: phase, reason, iteration, steps, returns (what `kubectl get experiment` shows)."""
    parts = [str(status.get("phase") or "Pending")]
    for key, label in (
        ("learnerIteration", "iteration"),
        ("envSteps", "env steps"),
        ("evalReturn", "eval return"),
        ("reason", "reason"),
    ):
        if status.get(key) not in (None, ""):
            parts.append(f"{label} {status[key]}")
    return ", ".join(parts)


def wait_for_end(
    kube: Kube,
    name: str,
    namespace: str,
    timeout: float,
    say: Callable[[str], None],
    every: float = 5.0,
) -> dict[str, Any]:
    """The Experiment's status once it ended (or the last one seen when time ran out)."""
    deadline = time.monotonic() + timeout
    last = ""
    status: dict[str, Any] = {}
    while True:
        obj = kube.get_or_none(EXPERIMENT, name, namespace)
        if obj is None:
            raise SurrealKubeError(f"Experiment {namespace}/{name} was deleted by someone else")
        status = obj.get("status") or {}
        line = describe_status(status)
        if line != last:
            say(line)
            last = line
        if status.get("phase") in ENDED or time.monotonic() >= deadline:
            return status
        time.sleep(every)


def run(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    kube = Kube(kubeconfig=args.kubeconfig, context=args.context)
    namespace = args.namespace or kube.namespace
    obj = smoke_object(
        args.name,
        namespace,
        release=args.release,
        env=args.env,
        max_env_steps=args.max_env_steps,
        num_evals=args.num_evals,
        resources=parse_resources(args.resources),
    )
    clear_leftover(kube, args.name, namespace, say)
    started = time.monotonic()
    kube.create(obj)
    say(f"created Experiment {namespace}/{args.name}: PPO on {args.env}, "
        f"{args.max_env_steps:,} env steps; waiting up to {args.timeout:.0f}s")  # fmt: skip
    try:
        status = wait_for_end(kube, args.name, namespace, args.timeout, say, every=args.poll)
    finally:
        kube.delete(EXPERIMENT, args.name, namespace)
        if not wait_gone(kube, args.name, namespace, timeout=300):
            say(f"warning: Experiment {namespace}/{args.name} is still being deleted")
    took = time.monotonic() - started
    if status.get("phase") == "Succeeded":
        say(f"passed in {took:.0f}s: {describe_status(status)}")
        return 0
    if status.get("phase") == "Failed":
        say(f"failed after {took:.0f}s: {describe_status(status)}")
    else:
        say(f"did not end within {args.timeout:.0f}s: {describe_status(status)}")
    return 1


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through run()'s finally: the Experiment goes too


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _terminate)

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        return run(args, say)
    except SurrealKubeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
