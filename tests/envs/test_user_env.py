"""Environments of the user's own package, by gymnasium's `module:id` form (issue 12 item 9)."""

from __future__ import annotations

import uuid
from pathlib import Path

import gymnasium as gym
import pytest

from surreal_kube.envs.ids import check_env_id
from surreal_kube.envs.make import check_env, make_env
from surreal_kube.errors import SpecError
from tests.envs.userpkg import env_id, write_user_project


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh user package on sys.path (a new name each time: modules are imported once)."""
    name = f"userpkg_{uuid.uuid4().hex[:8]}"
    write_user_project(tmp_path / "project", name)
    monkeypatch.syspath_prepend(str(tmp_path / "project"))
    return name


def test_the_check_imports_the_module_which_registers_the_env(package: str) -> None:
    assert f"{package}.envs:Tiny-v0" not in gym.registry
    assert check_env_id(env_id(package)) == []
    assert "Tiny-v0" in gym.registry


def test_an_unimportable_module_is_named(package: str) -> None:
    with pytest.raises(SpecError) as info:
        check_env_id(f"gym:{package}.nosuch:Tiny-v0")
    assert str(info.value).startswith(
        f"environment id 'gym:{package}.nosuch:Tiny-v0': module '{package}.nosuch' cannot be "
        f"imported here (No module named '{package}.nosuch'); install the project"
    )


def test_a_module_that_fails_on_import_says_how(package: str, tmp_path: Path) -> None:
    (tmp_path / "project" / package / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(SpecError, match=rf"importing module '{package}\.broken' failed: "):
        check_env_id(f"gym:{package}.broken:Tiny-v0")


def test_a_module_without_the_id_names_the_id(package: str) -> None:
    with pytest.raises(SpecError) as info:
        check_env_id(f"gym:{package}.envs:Tiny-v1")
    message = str(info.value)
    assert message.startswith(
        f"environment id 'gym:{package}.envs:Tiny-v1': importing module '{package}.envs' "
        "registered no environment 'Tiny-v1'"
    )
    assert "gymnasium.register(id='Tiny-v1', ...)" in message


def test_the_unprefixed_module_form_is_pointed_to_the_prefix() -> None:
    with pytest.raises(SpecError, match=r"did you mean 'gym:mypkg\.envs:Tiny-v0'\?$"):
        check_env_id("mypkg.envs:Tiny-v0")
    with pytest.raises(SpecError, match=r"'gym:not a module:Tiny-v0': 'not a module' is not a"):
        check_env_id("gym:not a module:Tiny-v0")


def test_make_and_check_build_the_users_env(package: str) -> None:
    obs_space, action_space = check_env(env_id(package), "ppo")
    assert obs_space.shape == (3,) and action_space.n == 2
    with pytest.raises(SpecError, match="ddpg needs continuous"):
        check_env(env_id(package), "ddpg")
    env = make_env(env_id(package), max_episode_steps=5)
    try:
        env.reset(seed=0)
        steps = 0
        while True:
            _, reward, terminated, truncated, _ = env.step(1)
            steps += 1
            assert reward == 1.0
            if terminated or truncated:
                break
        assert steps == 5  # the spec's max_episode_steps wraps the user's env too
    finally:
        env.close()
