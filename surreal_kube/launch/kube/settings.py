"""The user's settings file: the registry per kube context, set once and read by every verb.

`build --push` then `create` used to need the registry twice (a profile or $SURREAL_KUBE_REGISTRY
in both shells); without it `create` rendered Docker Hub names and the pods ended in
ImagePullBackOff. A registry belongs to a cluster, so it is kept per kube context, in
`$XDG_CONFIG_HOME/surreal-kube/config.yaml` (`~/.config/...`; `$SURREAL_KUBE_CONFIG` moves it),
written by `surreal-kube registry REF`. The order every verb reads it in: the profile's
`registry`, then $SURREAL_KUBE_REGISTRY, then this file's entry for the verb's kube context.

The file holds no secret: registry credentials stay where the engine and the cluster keep them
(the Docker config's credential helpers, the profile's pull secrets).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from surreal_kube.errors import SpecError

ENV_REGISTRY = "SURREAL_KUBE_REGISTRY"
ENV_FILE = "SURREAL_KUBE_CONFIG"

# host[:port] then path components, as a Docker reference's name part (distribution's grammar):
# lowercase, no scheme, no tag, no digest
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = rf"{_LABEL}(?:\.{_LABEL})*"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = re.compile(rf"{_HOST}(?::[0-9]{{1,5}})?(?:/{_COMPONENT})*")


def check_registry(value: str, where: str) -> str:
    """`value` as a registry prefix (`host[:port][/path]`); SpecError naming `where` if not."""
    text = value.strip().rstrip("/")
    hint = "e.g. us-docker.pkg.dev/my-project/surreal or 127.0.0.1:5000/team"
    if "://" in text:
        raise SpecError(f"{where}: {value!r} has a scheme; give the registry without it ({hint})")
    if "@" in text or (":" in text.rsplit("/", 1)[-1] and "/" in text):
        raise SpecError(
            f"{where}: {value!r} ends in a tag or digest; give only where images go ({hint})"
        )
    if not text or not _REGISTRY.fullmatch(text):
        raise SpecError(
            f"{where}: {value!r} is not a registry (host[:port] then lowercase path parts; {hint})"
        )
    return text


def settings_path() -> Path:
    """Where the settings file lives (it need not exist)."""
    moved = os.environ.get(ENV_FILE)
    if moved:
        return Path(moved)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else (_home() or Path("/nonexistent")) / ".config"
    return base / "surreal-kube" / "config.yaml"


def _home() -> Path | None:
    """The user's home; None for a uid with neither $HOME nor a passwd entry (a pod's)."""
    try:
        return Path.home()
    except RuntimeError:
        return None


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"settings file {path}: cannot be read ({exc}); fix or remove it") from exc
    if not isinstance(data, dict) or not isinstance(data.get("registries", {}), dict):
        raise SpecError(
            f"settings file {path}: expected a mapping with `registries: {{CONTEXT: REGISTRY}}`; "
            "fix or remove it"
        )
    return data


def current_context(kubeconfig: Path | None = None) -> str | None:
    """The kubeconfig's current context as kubectl picks it (the first file of $KUBECONFIG that
    sets one, else ~/.kube/config); None without a kubeconfig (a pod, a laptop with no cluster)."""
    if kubeconfig is not None:
        files = [kubeconfig]
    elif os.environ.get("KUBECONFIG"):
        files = [Path(p) for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        home = _home()
        files = [home / ".kube" / "config"] if home else []
    for path in files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and data.get("current-context"):
            return str(data["current-context"])
    return None


def registry_for(context: str | None = None, kubeconfig: Path | None = None) -> str | None:
    """$SURREAL_KUBE_REGISTRY, else the settings file's registry for `context` (None: the
    kubeconfig's current one). The profile's `registry`, where a verb has one, comes first."""
    env = os.environ.get(ENV_REGISTRY)
    if env:
        return check_registry(env, f"${ENV_REGISTRY}")
    name = context or current_context(kubeconfig)
    if name is None:
        return None
    path = settings_path()
    value = _read(path).get("registries", {}).get(name)
    return check_registry(str(value), f"{path}: registries.{name}") if value else None


def set_registry(context: str, registry: str | None) -> Path:
    """Write (None: remove) the registry of `context`; the file is replaced whole, atomically."""
    path = settings_path()
    data = _read(path)
    registries = dict(data.get("registries") or {})
    if registry is None:
        registries.pop(context, None)
    else:
        registries[context] = check_registry(registry, "registry")
    data["registries"] = registries
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config.", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("# surreal-kube settings (`surreal-kube registry` writes them)\n")
            yaml.safe_dump(data, out, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
