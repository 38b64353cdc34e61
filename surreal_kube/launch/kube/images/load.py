"""Built images into a cluster without a registry: a kind node, or a node's containerd.

Like `kind load`: the image is exported from the engine and imported into containerd's
`k8s.io` namespace, where the kubelet finds it (`imagePullPolicy: IfNotPresent`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.launch.kube.images.planner import TAG_LENGTH, ImagePlan, Progress, split_reference


def load_into_kind(
    plans: Sequence[ImagePlan], cluster: str, progress: Progress | None = None
) -> list[ImagePlan]:
    """Load built images into the nodes of a kind cluster instead of pushing them.

    Uses `kind load docker-image`, which reads from the Docker engine kind itself runs on.
    """
    say = progress or (lambda _line: None)
    kind = shutil.which("kind")
    if kind is None:
        raise LaunchError("loading images into kind needs the `kind` command on PATH")
    out = []
    for plan in plans:
        if plan.status in ("built", "present", "kept"):  # kind skips an image already there
            say(f"loading {plan.reference} into kind cluster {cluster}")
            done = subprocess.run(
                [kind, "load", "docker-image", plan.reference, "--name", cluster],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise LaunchError(
                    f"kind load of {plan.reference} failed: {done.stderr.strip() or done.stdout}"
                )
            plan = replace(plan, status="loaded")
        out.append(plan)
    return out


def normalized(reference: str) -> str:
    """The fully qualified name a kubelet asks containerd for: `a/b:t` -> `docker.io/a/b:t`."""
    first, sep, _rest = reference.partition("/")
    if not sep:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def check_containerd(address: str, ctr: str) -> str:
    """The ctr executable's path; SpecError (bad input, exit 2) if it or the socket is missing."""
    path = shutil.which(ctr)
    if path is None:
        raise SpecError(
            f"--ctr {ctr!r}: no such executable; name containerd's `ctr` (path or command on PATH)"
        )
    sock = Path(address.removeprefix("unix://"))
    if not sock.is_socket():
        raise SpecError(
            f"--containerd-address {address!r}: no containerd socket there; give the node's "
            "containerd socket, e.g. /run/containerd/containerd.sock"
        )
    return path


def load_into_containerd(
    plans: Sequence[ImagePlan],
    client: Any,
    *,
    address: str,
    ctr: str = "ctr",
    namespace: str = "k8s.io",
    progress: Progress | None = None,
) -> list[ImagePlan]:
    """Put built images into a node's containerd, like `kind load`, instead of pushing them.

    Each image leaves the engine as a docker-archive named by its normalized reference (what the
    kubelet asks for: `surreal-kube/x:t` is `docker.io/surreal-kube/x:t` to containerd), streamed
    into `ctr images import` in `namespace` (the CRI's), which unpacks it for the kubelet.
    """

    say = progress or (lambda _line: None)
    ctr_path = check_containerd(address, ctr)
    base = [ctr_path, "--address", address.removeprefix("unix://"), "--namespace", namespace]

    def names() -> set[str]:
        listed = subprocess.run([*base, "images", "ls", "-q"], capture_output=True, text=True)
        if listed.returncode != 0:
            raise LaunchError(f"ctr images ls failed: {listed.stderr.strip()}")
        return set(listed.stdout.split())

    have = names()
    sent: dict[str, str] = {}  # engine image id -> the name it was imported as
    out = []
    for plan in plans:
        if plan.status not in ("built", "present", "kept"):
            out.append(plan)
            continue
        full = normalized(plan.reference)
        if plan.status == "kept" and full in have:
            # a version tag never moves: the node keeps the build it holds under it
            say(f"{full} is in containerd already (a version tag: kept as it is)")
            out.append(plan)
            continue
        image_id = client.images.get(plan.reference).id
        exact = plan.content_hash is not None and plan.tag == plan.content_hash[:TAG_LENGTH]
        if image_id in sent:  # the same image under another name: a tag, not a second copy
            say(f"tagging {sent[image_id]} as {full} in containerd")
            done = subprocess.run(
                [*base, "images", "tag", "--force", sent[image_id], full],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise LaunchError(f"ctr images tag {full} failed: {done.stderr.strip()}")
        elif exact and full in have:
            say(f"{full} is in containerd already (same content-hash tag)")
        else:
            say(f"loading {plan.reference} into containerd {address} ({namespace}) as {full}")
            _import(client, plan.reference, full, [*base, "images", "import"], plan.platform)
        sent[image_id] = full
        if full not in names():
            raise LaunchError(f"loading {plan.reference} left no image {full} in containerd")
        out.append(replace(plan, status="loaded"))
    return out


def _import(client: Any, reference: str, full: str, ctr_import: list[str], platform: str) -> None:
    """Stream the engine's docker-archive of `reference`, named `full`, into `ctr import`."""
    from docker.errors import APIError

    repository, tag = split_reference(full)
    try:
        client.api.tag(reference, repository, tag, force=True)
        stream = client.api.get_image(full)
    except APIError as exc:
        raise LaunchError(f"exporting {reference} failed: {exc.explanation}") from exc
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            # --local: the client unpacks for the CRI's snapshotter (containerd 2's transfer
            # service does not read a stream); one platform, the image's. The layers' blobs are
            # let go once unpacked (the kubelet runs the snapshots): kept, they would double
            # what the image holds of the node's disk for as long as it stays.
            [*ctr_import, "--local", "--discard-unpacked-layers", "--platform", platform, "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        assert proc.stdin is not None
        try:
            for chunk in stream:
                proc.stdin.write(chunk)
        except BrokenPipeError:
            pass  # ctr stopped reading: its exit code and message say why
        finally:
            proc.stdin.close()
        code = proc.wait()
        err.seek(0)
        message = err.read().decode(errors="replace").strip()
    if code != 0:
        raise LaunchError(f"ctr images import of {reference} failed: {message}")
