"""The CLI's cluster verbs without a cluster: dispatch, options, errors, a fast --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from surreal_kube.cli import kube_view as kv
from surreal_kube.errors import SpecError

SK = [sys.executable, "-m", "surreal_kube.cli.main"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SK, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("2h", 7200), ("1d", 86400)]
)
def test_since_durations(text: str, seconds: int) -> None:
    assert kv.parse_since(text) == seconds


def test_bad_since_is_a_usage_error() -> None:
    with pytest.raises(SpecError, match="--since '5 minutes': expected a duration such as 30s"):
        kv.parse_since("5 minutes")


def test_local_flags_decide_where_a_verb_works_never_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SURREAL_KUBE_ROOT", str(tmp_path))
    (tmp_path / "exp-a").mkdir()
    (tmp_path / "exp-a" / "config.yml").write_text("metadata: {name: exp-a}\n")
    assert not kv.is_local("exp-a", False, None)  # one rule: a local folder does not decide
    assert kv.is_local("exp-b", True, None) and kv.is_local("exp-b", False, tmp_path)
    with pytest.raises(SpecError, match="--local and --context contradict each other"):
        kv.is_local("exp-a", True, None, None, "some-context", None)


def test_help_does_not_import_the_kubernetes_client() -> None:
    probe = (
        "import sys; from surreal_kube.cli import main; "
        "bad = [m for m in ('kubernetes', 'kopf', 'torch', 'zmq') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


@pytest.mark.parametrize(
    "verb", ["exec", "scale", "create", "logs", "tb", "delete", "list", "status"]
)
def test_cluster_verbs_have_kubectl_options(verb: str) -> None:
    res = run(verb, "--help")
    assert res.returncode == 0
    for flag in ("--namespace", "--context", "--kubeconfig"):
        assert flag in res.stdout, (verb, flag)


def test_no_kubeconfig_is_one_line_error(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SURREAL_KUBE_ROOT": str(tmp_path / "exps"),
    }
    res = run("status", "exp-none", env=env)
    assert res.returncode == 1
    assert res.stderr.startswith(
        "error: no experiment named 'exp-none': there is no kube context (no $KUBECONFIG"
    )
    assert "Traceback" not in res.stderr
    res = run("scale", "exp-none", "--agents", "2", "--kubeconfig", str(tmp_path / "nope"), env=env)
    assert res.returncode == 1 and "cannot load the Kubernetes configuration" in res.stderr
    # list with no kubeconfig anywhere: one line that points to --local
    res = run("list", "-o", "json", env=env)
    assert res.returncode == 1 and "add --local" in res.stderr
    res = run("list", "--local", "-o", "json", env=env)
    assert res.returncode == 0 and res.stdout.strip() == "[]"


def test_unreachable_cluster_is_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(config)}
    res = run("delete", "exp-x", "-n", "rl", env=env)
    assert res.returncode == 1
    assert res.stderr == (
        "error: The connection to the server 127.0.0.1:9 was refused - "
        "did you specify the right host or port?\n"
    )
