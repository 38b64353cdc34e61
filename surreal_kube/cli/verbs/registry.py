"""`surreal-kube registry`: set, once per kube context, where images are pushed and pulled from."""

from __future__ import annotations

from typing import Annotated

import typer

from surreal_kube.cli import kube_view as kv
from surreal_kube.cli.output import info, result
from surreal_kube.errors import SpecError


def registry(
    reference: Annotated[
        str | None,
        typer.Argument(
            metavar="[REGISTRY]",
            help="host[:port][/path], e.g. us-docker.pkg.dev/my-project/surreal; omitted: print "
            "the registry the verbs use for the context.",
            show_default=False,
        ),
    ] = None,
    unset: Annotated[bool, typer.Option("--unset", help="Forget the context's registry.")] = False,
    kubeconfig: kv.Kubeconfig = None,
    context: kv.Context = None,
) -> None:
    """Set the registry of a kube context: `build --push` pushes there, `render` and `create` name
    images there, with no flag to repeat.

    Kept in ~/.config/surreal-kube/config.yaml ($SURREAL_KUBE_CONFIG moves it). A profile's
    `registry:` and $SURREAL_KUBE_REGISTRY, when set, come first. No credentials are kept: the
    engine and the cluster pull with their own (credential helpers, image pull secrets).

    Examples:

    \b
      surreal-kube registry us-docker.pkg.dev/my-project/surreal
      surreal-kube registry --context kind-dev 127.0.0.1:5000/team
      surreal-kube registry            # which registry, and from where
      surreal-kube registry --unset
    """
    import os

    from surreal_kube.launch.kube import settings

    if unset and reference is not None:
        raise SpecError("--unset and a REGISTRY contradict each other: give one")
    name = context or settings.current_context(kubeconfig)
    if name is None:
        raise SpecError(
            "no kube context (no current-context in $KUBECONFIG or ~/.kube/config): give "
            "--context NAME, the context the registry belongs to"
        )
    override = os.environ.get(settings.ENV_REGISTRY)
    if unset or reference is not None:
        path = settings.set_registry(name, None if unset else reference)
        said = "forgotten" if unset else settings.registry_for(name)
        info(f"registry of context {name}: {said} ({path})")
        if override:
            info(f"note: ${settings.ENV_REGISTRY}={override} is set and comes first in this shell")
        return
    chosen = settings.registry_for(name)
    if chosen is None:
        info(
            f"no registry for context {name}: images stay in this engine (load them with "
            "`build --load` or `--kind-load`); set one with `surreal-kube registry REGISTRY`"
        )
        return
    where = f"${settings.ENV_REGISTRY}" if override else str(settings.settings_path())
    result(f"{chosen}\t{where}\n")
