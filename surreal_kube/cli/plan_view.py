"""The plan the CLI makes without a cluster, and how its objects are printed.

Shared by `render` and `create --dry-run=client`, so that what they print is one thing.
"""

from __future__ import annotations

from typing import Any

from surreal_kube.cli.image_options import image_chooser
from surreal_kube.cli.output import names, result


def print_objects(objects: list[dict[str, Any]], output: str | None) -> None:
    """Objects as YAML (the default), JSON or kind/name lines."""
    from surreal_kube.launch.kube.render.objects import dump_objects

    if output == "name":
        names([_kind_name(o) for o in objects])
        return
    result(dump_objects(objects, output or "yaml"))


def _kind_name(obj: dict[str, Any]) -> str:
    """kubectl's -o name: `configmap/exp`, `statefulset.apps/exp-agents`."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = str(obj.get("kind", "")).lower()
    return f"{kind}{'.' + group if group else ''}/{obj.get('metadata', {}).get('name', '')}"


def planned(
    exp: Any,
    namespace: str | None,
    *,
    profile: Any,
    images: dict[str, str],
    registry: str | None,
) -> Any:
    """The plan `create` would apply (`launch/kube/plan.py`), without a cluster.

    `render` and `create --dry-run=client` both print its objects, so they never differ, and
    they are the objects the operator renders for the same spec and profile. registry: where
    built images are named (`image_options.registry_of`).
    """
    from surreal_kube.launch.kube.plan import make_plan

    ns = namespace or exp.metadata.namespace or "default"
    return make_plan(
        exp,
        ns,
        profile=profile,
        images=image_chooser(registry, images, build=False, push=False, check=False),
    )
