"""Environment ids are checked against gymnasium's registry by every verb (issue 15 item 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from surreal_kube.envs.ids import check_env_id, quiet_gymnasium
from surreal_kube.errors import SpecError

SK = [sys.executable, "-m", "surreal_kube.cli.main"]


def cli(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SURREAL_KUBE_ROOT": str(root), "KUBECONFIG": str(root / "no-kubeconfig")}
    return subprocess.run([*SK, *args], capture_output=True, text=True, timeout=120, env=env)


def test_registry_check_with_one_suggestion() -> None:
    assert check_env_id("gym:Ant-v5") == []
    with pytest.raises(SpecError) as info:
        check_env_id("gym:HalfChetah-v5")
    message = str(info.value)
    assert message == (
        "unknown environment 'gym:HalfChetah-v5': not in gymnasium's registry; "
        "did you mean 'gym:HalfCheetah-v5'?"
    )
    assert message.lower().count("did you mean") == 1
    with pytest.raises(SpecError, match=r"did you mean 'gym:HalfCheetah-v5'\?$"):
        check_env_id("gym:HalfCheetah-v9")
    with pytest.raises(SpecError, match="not in gymnasium's registry; `python -c"):
        check_env_id("gym:NoSuchEnv-v0")


def test_bare_ids_are_pointed_to_the_prefix() -> None:
    with pytest.raises(SpecError, match=r"must look like .*; did you mean 'gym:CartPole-v1'\?$"):
        check_env_id("CartPole-v1")
    with pytest.raises(SpecError, match=r"must look like 'gym:<gymnasium id>', e\.g\. gym:Ant-v5$"):
        check_env_id("nope")


def test_module_form_needs_an_importable_module() -> None:
    assert check_env_id("gym:gymnasium.envs:Ant-v5") == []
    with pytest.raises(SpecError, match="module 'nosuchmodule' cannot be imported here"):
        check_env_id("gym:nosuchmodule:Thing-v0")


def test_outdated_version_is_a_plain_note() -> None:
    assert check_env_id("gym:HalfCheetah-v4") == [
        "gym:HalfCheetah-v4 is out of date; the newest is gym:HalfCheetah-v5"
    ]


def test_the_check_imports_neither_mujoco_nor_torch() -> None:
    code = (
        "import sys; from surreal_kube.envs.ids import check_env_id; "
        "check_env_id('gym:HalfCheetah-v5'); "
        "print(sorted(m for m in ('mujoco', 'torch') if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


def test_gymnasium_warnings_become_plain_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    import gymnasium as gym

    with caplog.at_level("WARNING"), quiet_gymnasium():
        gym.make("HalfCheetah-v4").close()
    texts = [r.getMessage() for r in caplog.records]
    assert any("HalfCheetah-v4 is out of date" in t for t in texts), texts
    assert not any("\x1b[" in t for t in texts)


@pytest.mark.parametrize(
    "verb",
    [
        ["config", "x"],
        ["topology", "x"],
        ["create", "x", "--dry-run"],
        ["create", "x", "--local", "--dry-run"],
        ["create", "x", "--local"],
        ["create", "x"],  # the cluster path: refused before any kubeconfig is read
    ],
)
def test_every_verb_refuses_an_unknown_env(verb: list[str], tmp_path: Path) -> None:
    res = cli(*verb, "--env", "gym:NoSuchEnv-v0", root=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: unknown environment 'gym:NoSuchEnv-v0'"), res.stderr
    assert "Traceback" not in res.stderr
    assert not any(tmp_path.iterdir())  # nothing half-created


def test_bare_env_flag_gets_the_prefix_suggested(tmp_path: Path) -> None:
    res = cli("config", "x", "--env", "CartPole-v1", root=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().endswith("did you mean 'gym:CartPole-v1'?"), res.stderr


def test_local_message_states_its_suggestion_once(tmp_path: Path) -> None:
    res = cli("create", "x", "--local", "--env", "gym:HalfChetah-v5", root=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: unknown environment 'gym:HalfChetah-v5': not in gymnasium's registry; "
        "did you mean 'gym:HalfCheetah-v5'?"
    ]


def test_outdated_env_warns_without_ansi_codes(tmp_path: Path) -> None:
    res = cli("create", "x", "--local", "--dry-run", "--env", "gym:HalfCheetah-v4", root=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "\x1b[" not in res.stderr and "\x1b[" not in res.stdout
    assert res.stderr.splitlines()[0] == (
        "warning: gym:HalfCheetah-v4 is out of date; the newest is gym:HalfCheetah-v5"
    )
