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


def _big_status():
    from surreal_kube.launch.kube.status.summary import (
        ComponentStatus,
        ExperimentStatus,
        ProcessStatus,
    )

    st = ExperimentStatus(
        phase="Pending",
        ready="681/1022",
        components={"agents": ComponentStatus(desired=1000, ready=667)},
    )
    for i in range(1022):
        st.processes[f"agents/{i}"] = ProcessStatus(
            pod=f"big-agents-{i}",
            phase="Running" if i % 3 else "Pending",
            ready=i % 3 != 0,
            restarts=i % 2,
            node=f"cpu-pool-{i}" if i % 3 else None,
            reason=None if i % 3 else "0/1000 nodes are available: 1000 Insufficient cpu",
        )
    return st


@pytest.mark.parametrize("terminal", [False, True])
def test_status_of_a_thousand_pods_is_one_aligned_line_each(terminal: bool) -> None:
    """The pod table of `status` is aligned text (a rich Table of 1,022 rows took 4-5 s to
    print): one line per pod, every column starting where its header starts, the phase styled
    on a terminal only, nothing wrapped or cut at 80 columns."""
    import io

    from rich.console import Console
    from rich.text import Text

    buf = io.StringIO()
    Console(
        file=buf, force_terminal=terminal, width=80, color_system="standard" if terminal else None
    ).print(kv.status_view("big", "ns", _big_status(), "applied directly"), soft_wrap=True)
    text = buf.getvalue()
    assert ("\x1b[" in text) is terminal
    if terminal:  # the phase of a pod's row is styled, and nothing else of that row
        (raw,) = [line for line in text.splitlines() if line.startswith("big-agents-1 ")]
        assert raw.count("\x1b[") == 2 and "m" + "Running" + "\x1b[0m" in raw, repr(raw)
    lines = Text.from_ansi(text).plain.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("POD "))
    rows = lines[header + 1 : header + 1 + 1022]
    assert [r.split()[0] for r in rows] == [f"big-agents-{i}" for i in range(1022)]
    starts = [lines[header].index(c) for c in ("PHASE", "READY", "RESTARTS", "NODE", "REASON")]
    for row in rows:
        for col in starts if len(row) > starts[-1] else starts[:-1]:  # an empty reason ends it
            assert row[col - 2 : col] == "  " and row[col] != " ", (row, col)
    assert rows[0].endswith("0/1000 nodes are available: 1000 Insufficient cpu")
    assert rows[1].split()[1:5] == ["Running", "yes", "1", "cpu-pool-1"]
    assert rows[0].split()[1:5] == ["Pending", "no", "0", "-"]
