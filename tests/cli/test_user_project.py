"""The user's own code, with surreal-kube pip-installed outside this repository (issue 12 item 9):
a wheel of this checkout in a fresh venv, a throwaway project with its own environment
(`gym:mypkg.envs:Tiny-v0`), and the verbs run in that project's folder as its author runs them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.user_project import (
    OFFLINE_PIP,
    UserSetup,
    build_user_image,
    installed_from,
    make_user_setup,
)
from tests.launch.kube.engine import (
    BASE_IMAGE,
    Engine,
    engine_or_skip,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> UserSetup:
    made = make_user_setup(tmp_path_factory.mktemp("user"))
    # the venv's surreal_kube is the wheel's, not this checkout's
    assert installed_from(made).is_relative_to(made.venv), installed_from(made)
    return made


def test_render_works_outside_the_checkout_with_the_users_image(setup: UserSetup) -> None:
    res = setup.run("render", "exp-user", "--env", setup.env_id, "-o", "json")
    assert res.returncode == 0, res.stderr
    objects = json.loads(res.stdout)["items"]
    refs = {
        c["image"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    (ref,) = refs
    assert ref.startswith("mypkg/surreal-kube-cpu:"), ref  # the project's image, not ours
    assert "gym:mypkg.envs:Tiny-v0" in res.stdout  # the spec the pods read
    # the same folder, the same tag
    again = setup.run("render", "exp-user", "--env", setup.env_id, "-o", "json")
    assert again.stdout == res.stdout


def test_an_unknown_module_or_id_is_refused_there(setup: UserSetup) -> None:
    res = setup.run("render", "exp-user", "--env", "gym:mypkg.nosuch:Tiny-v0")
    assert res.returncode == 2
    assert res.stderr.startswith(
        "error: environment id 'gym:mypkg.nosuch:Tiny-v0': module 'mypkg.nosuch' cannot be "
        "imported here"
    ), res.stderr
    res = setup.run("render", "exp-user", "--env", "gym:mypkg.envs:Tiny-v9")
    assert res.returncode == 2
    assert "registered no environment 'Tiny-v9'" in res.stderr, res.stderr


def test_a_local_run_of_the_users_env(setup: UserSetup, tmp_path: Path) -> None:
    root = tmp_path / "exps"
    args = ["--env", setup.env_id, "--num-agents", "2", "--num-evals", "1",
            "--max-env-steps", "1200", "--set", "evals.intervalSeconds=2"]  # fmt: skip
    res = setup.run("create", "exp-user", "--local", "--root", str(root), *args, timeout=900)
    try:
        assert res.returncode == 0, res.stderr[-4000:]
        assert "exp-user: succeeded (reached 1200 env steps)" in res.stderr, res.stderr[-3000:]
        summary = json.loads((root / "exp-user" / "results" / "summary.json").read_text())
        assert summary, summary
    finally:
        setup.run("delete", "exp-user", "--local", "--root", str(root), "--yes")


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    yield from engine_or_skip()


@pytest.mark.podman
@pytest.mark.timeout(3600)
def test_build_puts_the_project_on_the_runtime_image(setup: UserSetup, engine: Engine) -> None:
    rows = build_user_image(setup, engine.url, base_image=BASE_IMAGE)
    build_args = {"PYTHON_IMAGE": BASE_IMAGE, "PROJECT_PIP_ARGS": OFFLINE_PIP}
    user, status = rows["cpu"]
    assert status in ("built", "present") and user.startswith("mypkg/surreal-kube-cpu:")
    assert rows["cpu-runtime"][0].startswith("surreal-kube/runtime-cpu:")
    # the planner of that installation, in that folder, with those arguments, names the same
    # tag (what render and create compute; without build arguments they need no flag at all)
    plan = (
        "import json; from surreal_kube.experiment.resolve import resolve_experiment; "
        "from surreal_kube.launch.kube.images import planner as images; "
        f"print(json.dumps(images.references(images.plan_offline(resolve_experiment('exp-user'), "
        f"keys=['cpu'], build_args={json.dumps(build_args)}))))"
    )
    done = subprocess.run(
        [str(setup.python), "-c", plan], capture_output=True, text=True, cwd=setup.project,
        env=setup.env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"cpu": user}
    check = (
        "import json, mypkg.envs; from surreal_kube.envs.make import check_env; "
        "obs, act = check_env('gym:mypkg.envs:Tiny-v0', 'ppo'); "
        "print(json.dumps({'obs': list(obs.shape), 'actions': int(act.n), "
        "'where': mypkg.envs.__file__}))"
    )
    done = engine.podman(
        "run", "--rm", "--network=none", "--read-only", user, "python", "-c", check, timeout=300
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["obs"] == [3] and out["actions"] == 2
    assert out["where"].startswith("/opt/surreal/lib/python3.11/site-packages/mypkg/")
    arch = engine.podman("image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", user)
    assert arch.stdout.strip() == "linux/amd64"  # the default platform, whatever the host
    who = engine.podman("run", "--rm", "--network=none", user, "id", "-u")
    assert who.stdout.strip() == "10001"  # the user layer leaves the image non-root
