"""`surreal-kube-role`: exit codes and messages when the environment is wrong."""

from __future__ import annotations

import os
import subprocess
import sys


def _role(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SURREAL_")}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "surreal_kube.runtime", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_missing_environment_is_a_usage_error():
    res = _role(["learner"], {})
    assert res.returncode == 2
    assert "SURREAL_EXPERIMENT is not set" in res.stderr


def test_unknown_role_is_refused_by_the_parser():
    res = _role(["wizard"], {})
    assert res.returncode == 2 and "invalid choice" in res.stderr


def test_missing_endpoint_names_the_variable(local_run):
    run = local_run()
    env = run.env("ps")
    del env["SURREAL_PS_SERVE_BIND"]
    res = _role(["ps", "--id", "0"], env)
    assert res.returncode == 1
    assert "ps binds 'ps-serve' but SURREAL_PS_SERVE_BIND is not set" in res.stderr


def test_bad_config_is_reported_before_anything_starts(local_run, tmp_path):
    run = local_run()
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "apiVersion: surreal.ai/v1alpha1\nkind: Experiment\nmetadata: {name: t-exp}\nspec: {agents: {count: 0}}\n"
    )
    env = run.env("ps")
    env["SURREAL_CONFIG"] = str(bad)
    res = _role(["ps"], env)
    assert res.returncode == 2 and "agents.count" in res.stderr
