"""A user's setup, outside this repository: surreal-kube installed from a wheel built from this
checkout into a fresh virtual environment, and a throwaway project with its own gymnasium
environment (tests/envs/userpkg.py). For tests/cli/test_user_project.py and for end-to-end tests
that run the user's image on a cluster (`build_user_image`).

The venv is made without reinstalling torch and the rest: a .pth file appends this checkout's
.venv site-packages to its sys.path, after its own site-packages, where the wheel is installed. A
plain path line in a .pth does not run the .pth files of that folder, so the checkout's editable
install (a finder hooked in by a .pth there) stays inactive and `import surreal_kube` is the
wheel's (`installed_from` checks it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tests.envs.userpkg import env_id, write_user_project

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_PIP = "--no-index --no-build-isolation"
"""PROJECT_PIP_ARGS of the offline user-image build (setuptools is in the runtime image)."""


@dataclass(frozen=True)
class UserSetup:
    """The venv with the wheel, and the user's project folder (their package installed there)."""

    venv: Path
    project: Path
    wheel: Path
    env_id: str

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def surreal_kube(self) -> Path:
        """The `surreal-kube` console script the wheel installed."""
        return self.venv / "bin" / "surreal-kube"

    def env(self) -> dict[str, str]:
        """A user's environment: no PYTHONPATH into this checkout, no registry or platform set."""
        out = {k: v for k, v in os.environ.items() if not k.startswith("SURREAL_KUBE_")}
        out.pop("PYTHONPATH", None)
        out["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{out.get('PATH', '')}"
        out["VIRTUAL_ENV"] = str(self.venv)
        return out

    def run(
        self, *args: str, timeout: float = 600, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`surreal-kube ARGS` in the project folder, as the user types it there."""
        return subprocess.run(
            [str(self.surreal_kube), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.project,
            env={**self.env(), **(extra or {})},
        )


def _pip(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def build_wheel(dest: Path) -> Path:
    """`pip wheel --no-deps` of this checkout (from a copy: no build/ or egg-info left here)."""
    src = dest / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "surreal_kube", src / "surreal_kube", ignore=shutil.ignore_patterns("__pycache__")
    )
    dist = dest / "dist"
    _pip(
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        str(dist),
        str(src),
        cwd=dest,
    )
    (wheel,) = dist.glob("surreal_kube-*.whl")
    return wheel


def make_user_setup(workdir: Path, package: str = "mypkg") -> UserSetup:
    """Wheel, venv and project under `workdir` (the venv outside the project, as most keep it)."""
    wheel = build_wheel(workdir / "wheel")
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz_surreal_kube_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"  # this checkout's .venv: torch, gymnasium, ...
    )
    python = str(venv / "bin" / "python")
    _pip("--python", python, "install", "--no-deps", "--no-index", str(wheel), cwd=workdir)
    project = write_user_project(workdir / "project", package)
    _pip(
        "--python", python, "install", "--no-deps", "--no-index", "--no-build-isolation",
        str(project), cwd=workdir,
    )  # fmt: skip
    return UserSetup(venv, project, wheel, env_id(package))


def installed_from(setup: UserSetup) -> Path:
    """Where the venv's `import surreal_kube` comes from (must be the venv, not this checkout)."""
    done = subprocess.run(
        [str(setup.python), "-c", "import surreal_kube; print(surreal_kube.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=setup.project,
        env=setup.env(),
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip()).parent


def build_user_image(
    setup: UserSetup,
    engine_url: str,
    *extra: str,
    base_image: str | None = None,
    name: str = "exp-user",
) -> dict[str, tuple[str, str]]:
    """`surreal-kube build NAME` in the user's project folder, as the user runs it; returns
    key -> (reference, status) of its output rows ("cpu": the user's image, "cpu-runtime": the
    runtime image under it, "operator").

    Offline: `base_image` (tests/launch/kube/engine.py's BASE_IMAGE) stands in for
    python:3.11-slim, the runtime's pinned wheels come from the host's wheelhouse, and the
    project installs with `--no-index --no-build-isolation` (setuptools is in the runtime image).
    `extra`: more `build` arguments, e.g. `--load --containerd-address SOCK --ctr CTR` to put the
    images into a node's containerd. Build arguments are part of the tag and `create` takes none:
    run it in the same folder with `--image cpu=<rows["cpu"][0]>` (without build arguments, as a
    user with a registry builds, `create` computes that tag itself).
    """
    args = ["build", name, "--env", setup.env_id, "--engine", engine_url]
    if base_image is not None:
        args += ["--build-arg", f"PYTHON_IMAGE={base_image}"]
    args += ["--build-arg", f"PROJECT_PIP_ARGS={OFFLINE_PIP}", *extra]
    done = setup.run(*args, timeout=3000)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    return {key: (ref, status) for key, ref, status in rows}
