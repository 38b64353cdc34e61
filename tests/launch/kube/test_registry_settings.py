"""The registry is set once, per kube context, and every verb reads it (issue 24 item 6).

The defect: `build --push` then `create` without the registry again rendered Docker Hub names
(`surreal-kube/runtime-cpu:...`) and the pods ended in ImagePullBackOff. Now
`surreal-kube registry REF` keeps it for the kube context, and `build`, `render` and `create`
name images there; the profile's `registry` and $SURREAL_KUBE_REGISTRY come first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from surreal_kube.errors import SpecError
from surreal_kube.launch.kube import settings

ROOT = Path(__file__).resolve().parents[3]
SK = [sys.executable, "-m", "surreal_kube.cli.main"]


def kubeconfig(path: Path, current: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": current,
                "contexts": [
                    {"name": n, "context": {"cluster": n, "user": n}} for n in ("gke-a", "kind-b")
                ],
                "clusters": [
                    {"name": n, "cluster": {"server": "https://127.0.0.1:1"}}
                    for n in ("gke-a", "kind-b")
                ],
                "users": [{"name": n, "user": {}} for n in ("gke-a", "kind-b")],
            }
        )
    )
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A settings file and a kubeconfig (current context gke-a) of this test's own."""
    monkeypatch.setenv("SURREAL_KUBE_CONFIG", str(tmp_path / "cfg" / "config.yaml"))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", "gke-a")))
    monkeypatch.delenv("SURREAL_KUBE_REGISTRY", raising=False)
    return dict(os.environ)


def sk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SK, *args], capture_output=True, text=True, env=env, timeout=120)


def images_of(rendered: str) -> set[str]:
    return {
        c["image"]
        for o in yaml.safe_load_all(rendered)
        if o["kind"] in ("Deployment", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }


def test_set_once_then_render_build_and_create_name_the_registry(home: dict[str, str]) -> None:
    before = sk(home, "render", "exp-r")
    assert before.returncode == 0, before.stderr
    (plain,) = images_of(before.stdout)
    assert plain.startswith("surreal-kube/runtime-cpu:")  # no registry: a local name

    done = sk(home, "registry", "us-docker.pkg.dev/proj/surreal")
    assert done.returncode == 0, done.stderr
    assert "registry of context gke-a: us-docker.pkg.dev/proj/surreal" in done.stderr

    shown = sk(home, "registry")
    assert shown.stdout.split("\t")[0] == "us-docker.pkg.dev/proj/surreal"

    after = sk(home, "render", "exp-r")
    assert images_of(after.stdout) == {f"us-docker.pkg.dev/proj/surreal/{plain}"}
    # build (which needs an engine to run) plans through the same default
    from surreal_kube.launch.kube.images import planner

    assert planner.default_registry() == "us-docker.pkg.dev/proj/surreal"
    client = sk(home, "create", "exp-r", "--dry-run=client")
    assert client.returncode == 0, client.stderr
    assert f"image: us-docker.pkg.dev/proj/surreal/{plain}" in client.stdout

    # another context has its own (or none); --context picks it
    other = sk(home, "render", "exp-r", "--context", "kind-b")
    assert images_of(other.stdout) == {plain}
    assert sk(home, "registry", "--context", "kind-b", "127.0.0.1:5000/team").returncode == 0
    other = sk(home, "render", "exp-r", "--context", "kind-b")
    assert images_of(other.stdout) == {f"127.0.0.1:5000/team/{plain}"}

    # the environment comes first, then the file; --unset forgets
    env = {**home, "SURREAL_KUBE_REGISTRY": "europe-docker.pkg.dev/p/r"}
    assert images_of(sk(env, "render", "exp-r").stdout) == {f"europe-docker.pkg.dev/p/r/{plain}"}
    assert sk(home, "registry", "--unset").returncode == 0
    assert images_of(sk(home, "render", "exp-r").stdout) == {plain}
    saved = yaml.safe_load(Path(home["SURREAL_KUBE_CONFIG"]).read_text())
    assert saved == {"registries": {"kind-b": "127.0.0.1:5000/team"}}


def test_the_profile_registry_comes_first(home: dict[str, str], tmp_path: Path) -> None:
    assert sk(home, "registry", "us-docker.pkg.dev/proj/surreal").returncode == 0
    profile = tmp_path / "profile.yaml"
    profile.write_text("registry: reg.example/team\n")
    done = sk(home, "render", "exp-r", "--profile", str(profile))
    (image,) = images_of(done.stdout)
    assert image.startswith("reg.example/team/surreal-kube/runtime-cpu:")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("https://reg.example/team", "has a scheme"),
        ("reg.example/team:v1", "ends in a tag or digest"),
        ("reg.example/team@sha256:ab", "ends in a tag or digest"),
        ("reg.example/Team", "is not a registry"),
        ("", "is not a registry"),
        ("reg.example/a b", "is not a registry"),
    ],
)
def test_a_bad_registry_is_one_line_exit_2_and_nothing_written(
    home: dict[str, str], value: str, message: str
) -> None:
    done = sk(home, "registry", value)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not Path(home["SURREAL_KUBE_CONFIG"]).exists()


def test_good_registries_pass_as_given() -> None:
    for value in (
        "us-docker.pkg.dev/my-project/surreal",
        "127.0.0.1:5000",
        "localhost:5000/a/b",
        "docker.io/myteam",
        "ghcr.io/org/sub-team_x",
    ):
        assert settings.check_registry(value, "registry") == value
    assert settings.check_registry("reg.example/team/", "registry") == "reg.example/team"


def test_a_bad_profile_registry_names_the_profile_field(tmp_path: Path) -> None:
    from surreal_kube.launch.kube.profile import load_profile

    path = tmp_path / "p.yaml"
    path.write_text("registry: https://reg.example/x\n")
    with pytest.raises(SpecError, match=r"registry.*has a scheme"):
        load_profile(path)


def test_without_a_kube_context_the_verb_asks_for_one(home: dict[str, str], tmp_path: Path) -> None:
    env = {**home, "KUBECONFIG": str(tmp_path / "none")}
    done = sk(env, "registry", "reg.example/x")
    assert done.returncode == 2 and "give --context NAME" in done.stderr, done.stderr
    assert sk(env, "registry", "--context", "c1", "reg.example/x").returncode == 0
    # a context that is not current: nothing else reads it
    assert settings.current_context(tmp_path / "none") is None


def test_current_context_as_kubectl_merges_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "first"
    first.write_text("apiVersion: v1\nkind: Config\n")  # sets no current-context
    second = kubeconfig(tmp_path / "second", "kind-b")
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    assert settings.current_context() == "kind-b"


def test_a_broken_settings_file_is_named(home: dict[str, str]) -> None:
    path = Path(home["SURREAL_KUBE_CONFIG"])
    path.parent.mkdir(parents=True)
    path.write_text("registries: [a, b]\n")
    done = sk(home, "render", "exp-r")
    assert done.returncode == 2 and f"settings file {path}" in done.stderr, done.stderr
