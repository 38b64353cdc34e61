"""`create` checks a built image where the cluster pulls it: its registry (issue 24 item 6).

Before, the check asked the local engine, which the cluster never sees: an image built and not
pushed passed pre-flight and the pods ended in ImagePullBackOff. Against a real OCI registry on
a loopback port (the `registry` add-on: go-containerregistry's pkg/registry).
"""

from __future__ import annotations

import base64
import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from surreal_kube.cli.image_options import resolve_images
from surreal_kube.errors import LaunchError, SpecError
from surreal_kube.experiment.resolve import resolve_experiment
from surreal_kube.launch.kube.images import planner, remote
from tests.cluster.registry import Registry, registry_bin, running_registry

pytestmark = pytest.mark.cluster  # the registry is a cluster add-on: built with them (`make test`)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if registry_bin() is None:
        pytest.skip("the registry add-on is not built: run `make cluster-addons`")
    with running_registry(tmp_path_factory.mktemp("registry") / "registry.log") as reg:
        yield reg


def test_the_registry_is_asked_for_the_manifest(registry: Registry) -> None:
    ref = f"{registry.host}/team/tiny:abc123"
    assert remote.manifest_exists(ref).status == "missing"
    registry.push_image(ref)
    assert remote.manifest_exists(ref).status == "present"
    assert remote.manifest_exists(f"{registry.host}/team/tiny:other").status == "missing"


def test_an_unreachable_registry_is_unknown_with_the_reason() -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    answer = remote.manifest_exists(f"127.0.0.1:{port}/team/tiny:abc")
    assert answer.status == "unknown"
    assert f"127.0.0.1:{port} cannot be reached over http" in answer.reason


def test_create_refuses_a_built_image_missing_from_its_registry_then_takes_it(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = resolve_experiment("exp-reg")
    team = f"{registry.host}/team"
    (ref,) = planner.planned_references(exp, keys=["cpu"], registry=team).values()
    with pytest.raises(LaunchError, match=r"is not in its registry, where the cluster pulls it"):
        resolve_images(exp, team, {}, build=False, push=False, check=True, used=["cpu"])
    registry.push_image(ref)
    chosen = resolve_images(exp, team, {}, build=False, push=False, check=True, used=["cpu"])
    assert chosen == {"cpu": ref}


def test_an_unreachable_registry_is_a_warning_not_a_refusal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        team = f"127.0.0.1:{s.getsockname()[1]}/team"
    exp = resolve_experiment("exp-reg")
    chosen = resolve_images(exp, team, {}, build=False, push=False, check=True, used=["cpu"])
    assert chosen["cpu"].startswith(f"{team}/surreal-kube/runtime-cpu:")
    assert "not checked in its registry" in capsys.readouterr().err


def test_build_without_push_into_a_registry_is_refused_before_building() -> None:
    exp = resolve_experiment("exp-reg")
    with pytest.raises(SpecError, match=r"--build names images in registry .* add --push"):
        resolve_images(exp, "reg.example/t", {}, build=True, push=False, check=True, used=["cpu"])


def test_credentials_come_from_the_docker_config_never_from_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`auths` entries and `credHelpers` (the docker-credential-* protocol: host on stdin, JSON
    {Username, Secret} on stdout), as a Docker or gcloud user has them."""
    helper = tmp_path / "bin" / "docker-credential-sk-test"
    helper.parent.mkdir()
    helper.write_text(
        "#!/bin/sh\nread host\n"
        'printf \'{"ServerURL":"%s","Username":"oauth2accesstoken","Secret":"s3"}\' "$host"\n'
    )
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{helper.parent}:/usr/bin:/bin")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "auths": {"reg.example": {"auth": base64.b64encode(b"me:pw").decode()}},
                "credHelpers": {"us-docker.pkg.dev": "sk-test"},
            }
        )
    )
    assert remote.credentials("reg.example") == ("me", "pw")
    assert remote.credentials("us-docker.pkg.dev") == ("oauth2accesstoken", "s3")
    assert remote.credentials("other.example") is None


def test_references_name_their_registry_as_docker_reads_them() -> None:
    assert remote.registry_host("127.0.0.1:5000/a/b:t") == ("127.0.0.1:5000", "a/b")
    assert remote.registry_host("surreal-kube/runtime-cpu:t") == (
        remote.DOCKER_HUB,
        "surreal-kube/runtime-cpu",
    )
    assert remote.registry_host("python:3.11") == (remote.DOCKER_HUB, "library/python")
    assert remote.registry_host("localhost/x:t") == ("localhost", "x")
