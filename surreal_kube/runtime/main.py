"""`surreal-kube-role <role> [--id N]`: the one entry point of every process of an experiment.

Everything else comes from the environment (see `runtime.context`). Exit codes: 0 after a clean
stop (SIGTERM/SIGINT), 1 when the role failed, 2 for a bad command line or environment.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from surreal_kube.errors import SurrealKubeError

log = logging.getLogger("surreal_kube.runtime")

ROLES: dict[str, str] = {
    "learner": "surreal_kube.runtime.learner:LearnerRole",
    "replay": "surreal_kube.runtime.replay:ReplayBalancer",
    "replay-shard": "surreal_kube.runtime.replay:ReplayShard",
    "ps": "surreal_kube.runtime.ps:ParameterProxy",
    "ps-shard": "surreal_kube.runtime.ps:ParameterShardRole",
    "tensorplex": "surreal_kube.runtime.tensorplex:TensorplexRole",
    "loggerplex": "surreal_kube.runtime.loggerplex:LoggerplexRole",
    "tensorboard": "surreal_kube.runtime.tensorboard:TensorboardRole",
    "agents": "surreal_kube.runtime.agent:AgentsRole",
    "eval": "surreal_kube.runtime.eval:EvalRole",
}
"""Role name -> class, imported lazily so that a replay shard never imports torch."""


def role_class(role: str) -> type:
    """The class implementing `role`."""
    module, _, name = ROLES[role].partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    """Run one role until it is stopped; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="surreal-kube-role",
        description="Run one process of a surreal-kube experiment (environment from the topology).",
    )
    parser.add_argument("role", choices=sorted(ROLES), help="the role to run")
    parser.add_argument("--id", type=int, default=None, help="replica or shard index")
    args = parser.parse_args(argv)

    from surreal_kube.runtime.context import RoleContext
    from surreal_kube.runtime.lifecycle import StopFlag, install_signal_handlers, watch_supervisor
    from surreal_kube.runtime.logs import setup_logging

    try:
        ctx = RoleContext.from_env(role=args.role, index=args.id)
    except SurrealKubeError as exc:
        print(f"surreal-kube-role: {exc}", file=sys.stderr)
        return 2
    setup_logging(ctx.process, ctx.optional_addr("loggerplex"))
    stop = StopFlag()
    install_signal_handlers(stop)
    watch_supervisor(stop)  # a role never outlives the local supervisor that started it
    role = None
    code = 0
    try:
        ctx.spec  # noqa: B018 - load the config now: a bad one is a start-up error
        role = role_class(args.role)(ctx, stop)
        role.run()
        log.info("stopped (%s)", stop.reason or "done")
    except SurrealKubeError as exc:
        log.error("%s", exc)
        code = exc.exit_code
    except Exception:
        log.exception("%s failed", ctx.process)
        code = 1
    finally:
        if role is not None:
            try:
                role.close()
            except Exception:
                log.exception("error while closing %s", ctx.process)
        logging.shutdown()
    return code


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
