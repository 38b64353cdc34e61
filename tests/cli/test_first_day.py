"""Issue 15, the first day with the CLI: each defect a new user hit, as that user hits it.

Every test runs the real `surreal-kube` entry point in a subprocess with a clean HOME, so no
kubeconfig or experiment of the machine leaks in. The unreachable cluster is a real closed port
on 127.0.0.1 (nothing listens), which is what a stopped cluster looks like to a client.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SK = [sys.executable, "-m", "surreal_kube.cli.main"]
REFUSED = "was refused - did you specify the right host or port?"


def run(
    *args: str, home: Path, stdin: str | None = None, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "SURREAL_KUBE_ROOT": str(home / "exps"),
        **(extra or {}),
    }
    return subprocess.run(
        [*SK, *args], capture_output=True, text=True, timeout=120, env=env, input=stdin
    )


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubeconfig_to(tmp_path: Path, port: int) -> Path:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: rl}}]\n"
    )
    return config


def fake_local_experiment(root: Path, name: str, *, results: bool = True) -> Path:
    """A finished local experiment's folder, as the supervisor leaves it (no process runs)."""
    folder = root / name
    (folder / "results").mkdir(parents=True)
    (folder / "checkpoints").mkdir()
    (folder / "logs").mkdir()
    (folder / "tensorboard").mkdir()
    cfg = subprocess.run(
        [*SK, "config", name, "--num-agents", "1"], capture_output=True, text=True, check=True
    )
    (folder / "config.yml").write_text(cfg.stdout)
    (folder / "state.json").write_text(
        json.dumps({"name": name, "phase": "Succeeded", "env_steps": 1000, "elapsed": 35.87052})
    )
    if results:
        (folder / "results" / "summary.json").write_text("{}")
        (folder / "checkpoints" / "learner.1000.ckpt").write_bytes(b"\0" * 4096)
    return folder


# ------------------------------------------------------------ 1: one rule for where it lives


def test_a_missing_name_without_kubeconfig_says_no_experiment_not_invalid_kubeconfig(
    tmp_path: Path,
) -> None:
    for verb in ("status", "delete", "logs", "tb"):
        args = [verb, "nosuch", *(["learner"] if verb == "logs" else [])]
        res = run(*args, home=tmp_path)
        assert res.returncode == 1, (verb, res.stderr)
        line = res.stderr.strip()
        assert line.startswith("error: no experiment named 'nosuch': there is no kube context")
        assert "add --local" in line and "Invalid kube-config" not in line
        assert len(line.splitlines()) == 1


def test_local_flags_are_local_for_every_verb_and_a_miss_says_where_it_looked(
    tmp_path: Path,
) -> None:
    root = tmp_path / "elsewhere"
    res = run("status", "nosuch", "--root", str(root), home=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip() == f"error: no local experiment named 'nosuch' under {root}"
    # create --resume --root without --local is local, not the cluster
    res = run("create", "nosuch", "--resume", "--root", str(root), home=tmp_path)
    assert res.returncode == 2
    assert "--resume: no experiment named 'nosuch'" in res.stderr
    assert "kube" not in res.stderr


def test_a_local_twin_is_pointed_to_from_the_cluster_path(tmp_path: Path) -> None:
    fake_local_experiment(tmp_path / "exps", "exp-here")
    res = run("status", "exp-here", home=tmp_path)
    assert res.returncode == 1
    assert f"a local experiment 'exp-here' exists under {tmp_path / 'exps'}: add --local" in (
        res.stderr
    )
    res = run("status", "exp-here", "--local", "-o", "json", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["phase"] == "Succeeded"


def test_create_without_kubeconfig_hints_at_local(tmp_path: Path) -> None:
    res = run("create", "exp-a", home=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip() == (
        "error: cannot create 'exp-a' on a cluster: there is no kube context (no $KUBECONFIG, "
        "no ~/.kube/config, not in a pod); to run it on this machine as local processes add "
        "--local"
    )


def test_cluster_only_create_flags_need_local(tmp_path: Path) -> None:
    res = run("create", "exp-a", "--resume", "-n", "rl", home=tmp_path)
    assert res.returncode == 2
    assert "--resume is for local experiments: add --local" in res.stderr


# ------------------------------------------------------------ 2: tables in pipes


def test_topology_in_a_pipe_keeps_every_name_whole(tmp_path: Path) -> None:
    res = run(
        "topology",
        "exp-ppo-ant",
        "--num-agents",
        "8",
        "--agent-batch",
        "4",
        home=tmp_path,
        extra={"COLUMNS": "80"},
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["PROCESS", "GROUP", "ROLE", "AGENTS", "BINDS", "CONNECTS"]
    assert sum("replay-sampler-backend" in line for line in lines) >= 2
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["agents-1"][:4] == ["agents-1", "agents", "agents", "4-7"]
    assert not any(ch in res.stdout for ch in "│━┃─")  # no box drawing in a pipe


def test_local_list_in_a_pipe_is_plain_columns(tmp_path: Path) -> None:
    fake_local_experiment(tmp_path / "exps", "exp-a-rather-long-experiment-name-here")
    res = run("list", "--local", home=tmp_path, extra={"COLUMNS": "40"})
    assert res.returncode == 0, res.stderr
    header, row = res.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "PHASE", "AGE"]
    assert row.split()[:2] == ["exp-a-rather-long-experiment-name-here", "Succeeded"]


# ------------------------------------------------------------ 4: name suggestions


def test_a_too_long_name_gets_a_suggestion_that_is_itself_accepted(tmp_path: Path) -> None:
    long_name = "exp-" + "a" * 66
    res = run("config", long_name, home=tmp_path)
    assert res.returncode == 2
    suggestion = res.stderr.split("'")[-2]
    assert suggestion != long_name
    again = run("config", suggestion, home=tmp_path)
    assert again.returncode == 0, again.stderr


# ------------------------------------------------------------ 5: -o and kubectl habits


@pytest.mark.parametrize("fmt", ["jsn", "wide", "table", "xml"])
@pytest.mark.parametrize("verb", ["config", "topology", "render", "list", "status"])
def test_unknown_output_formats_are_refused_with_the_valid_list(
    tmp_path: Path, verb: str, fmt: str
) -> None:
    args = [verb] if verb == "list" else [verb, "exp"]
    res = run(
        *args,
        "--local" if verb in ("list", "status") else "--set=agents.count=1",
        "-o",
        fmt,
        home=tmp_path,
    )
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"error: --output {fmt!r}: unknown format; valid: json, yaml, name"
    )
    assert res.stdout == ""


def test_every_showing_verb_speaks_json_yaml_and_name(tmp_path: Path) -> None:
    fake_local_experiment(tmp_path / "exps", "exp-o")
    cases = {
        "config": ["config", "exp-o"],
        "topology": ["topology", "exp-o", "--num-agents", "2"],
        "render": ["render", "exp-o"],
        "list": ["list", "--local"],
        "status": ["status", "exp-o", "--local"],
    }
    for verb, args in cases.items():
        as_json = run(*args, "-o", "json", home=tmp_path)
        as_yaml = run(*args, "-o", "yaml", home=tmp_path)
        assert as_json.returncode == 0 and as_yaml.returncode == 0, (verb, as_json.stderr)
        if verb == "render":  # a List in JSON, a stream of documents in YAML, as kubectl
            assert json.loads(as_json.stdout)["items"] == list(yaml.safe_load_all(as_yaml.stdout))
        else:
            assert json.loads(as_json.stdout) == yaml.safe_load(as_yaml.stdout), verb
        as_name = run(*args, "-o", "name", home=tmp_path)
        assert as_name.returncode == 0, (verb, as_name.stderr)
        assert as_name.stdout.strip(), verb
    names = run(*cases["topology"], "-o", "name", home=tmp_path).stdout.split()
    assert names[0] == "learner" and "agents-1" in names
    assert run(*cases["list"], "-o", "name", home=tmp_path).stdout == "exp-o\n"
    rendered = run(*cases["render"], "-o", "name", home=tmp_path).stdout.split()
    assert rendered[0] == "configmap/exp-o-config" and "statefulset.apps/exp-o-agents" in rendered


def test_status_json_rounds_elapsed(tmp_path: Path) -> None:
    fake_local_experiment(tmp_path / "exps", "exp-r")
    res = run("status", "exp-r", "--local", "-o", "json", home=tmp_path)
    assert json.loads(res.stdout)["elapsed"] == 35.9


def test_dry_run_as_kubectl_users_type_it(tmp_path: Path) -> None:
    res = run("create", "exp-d", "--dry-run=client", "--num-agents", "2", home=tmp_path)
    assert res.returncode == 0, res.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(res.stdout)]
    assert kinds[0] == "ConfigMap" and "StatefulSet" in kinds
    res = run("create", "exp-d", "--dry-run=maybe", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == "error: --dry-run=maybe: unknown mode; valid: client, server, none"


def test_render_and_client_dry_run_print_the_same_objects(tmp_path: Path) -> None:
    # an explicit image: the content-hash tag of a build would follow edits to the source tree
    image = ["--image", "cpu=registry.test/runtime:v1"]
    rendered = run("render", "exp-p", "-n", "rl", *image, home=tmp_path)
    dry = run("create", "exp-p", "--dry-run=client", "-n", "rl", *image, home=tmp_path)
    assert rendered.returncode == 0 and dry.returncode == 0, rendered.stderr + dry.stderr
    assert rendered.stdout == dry.stdout
    config_map = next(yaml.safe_load_all(rendered.stdout))
    spec = yaml.safe_load(config_map["data"]["experiment.yaml"])
    assert spec["spec"]["images"]["cpu"]["image"] == "registry.test/runtime:v1"  # pinned


def test_spec_from_stdin(tmp_path: Path) -> None:
    spec = run("config", "exp-in", "--num-agents", "3", home=tmp_path).stdout
    res = run("topology", "exp-in", "-f", "-", "-o", "name", home=tmp_path, stdin=spec)
    assert res.returncode == 0, res.stderr
    assert [n for n in res.stdout.split() if n.startswith("agents-")] == [
        "agents-0",
        "agents-1",
        "agents-2",
    ]


def test_durations_as_kubectl_users_type_them(tmp_path: Path) -> None:
    res = run("config", "exp-t", "--max-time", "10m", "-o", "json", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["spec"]["session"]["maxTimeSeconds"] == 600
    res = run("delete", "exp-t", "-n", "rl", "--timeout", "five minutes", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: --timeout 'five minutes': expected a duration such as 600, 90s, 5m, 2h or 1d"
    )


# ------------------------------------------------------------ 6: unreachable cluster


@pytest.mark.parametrize(
    "args",
    [
        ["create", "exp-u"],
        ["create", "exp-u", "--skip-preflight"],
        ["create", "exp-u", "--dry-run-server"],
        ["create", "exp-u", "--dry-run=server"],
        ["status", "exp-u"],
        ["list"],
        ["delete", "exp-u"],
        ["logs", "exp-u", "learner"],
        ["tb", "exp-u"],
        ["scale", "exp-u", "--agents", "2"],
        ["results", "exp-u"],
        ["exec", "exp-u", "learner", "--", "true"],
        ["render", "exp-u", "--discover"],
    ],
)
def test_an_unreachable_cluster_is_kubectls_one_line(tmp_path: Path, args: list[str]) -> None:
    port = closed_port()
    config = kubeconfig_to(tmp_path, port)
    res = run(*args, home=tmp_path, extra={"KUBECONFIG": str(config)})
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == (f"error: The connection to the server 127.0.0.1:{port} {REFUSED}")


# ------------------------------------------------------------ 8: delete asks first


def test_delete_without_a_terminal_refuses_to_throw_away_results(tmp_path: Path) -> None:
    root = tmp_path / "exps"
    folder = fake_local_experiment(root, "exp-keep")
    res = run("delete", "exp-keep", "--local", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"error: delete would remove exp-keep and its results and checkpoints (4.0 KiB) in "
        f"{folder}; stdin is not a terminal, so nothing was asked: confirm with --yes, or stop "
        "it and keep the files with --keep-files"
    )
    assert (folder / "checkpoints" / "learner.1000.ckpt").exists()
    res = run("delete", "exp-keep", "--local", "-y", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "removing" in res.stderr and res.stderr.strip().endswith("deleted exp-keep")
    assert not folder.exists()
    assert list(root.iterdir()) == []  # no stray .lock


def test_delete_of_an_experiment_without_results_does_not_ask(tmp_path: Path) -> None:
    folder = fake_local_experiment(tmp_path / "exps", "exp-empty", results=False)
    res = run("delete", "exp-empty", "--root", str(tmp_path / "exps"), home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not folder.exists()


# ------------------------------------------------------------ 9: help text


VERBS = [
    "create",
    "config",
    "topology",
    "render",
    "build",
    "list",
    "status",
    "logs",
    "tb",
    "delete",
    "exec",
    "scale",
    "results",
]


@pytest.mark.parametrize("verb", VERBS)
def test_help_reads_well(tmp_path: Path, verb: str) -> None:
    res = run(verb, "--help", home=tmp_path, extra={"COLUMNS": "80"})
    assert res.returncode == 0
    text = res.stdout
    assert all(len(line) <= 80 for line in text.splitlines()), verb  # examples included
    assert "Examples" in text, verb
    for bad in ("<bool>", "<list[", "<str>", "<int>", "<path>", "<float>", "╭", "{name}"):
        assert bad not in text, (verb, bad)
    assert text.startswith(f"Usage: surreal-kube {verb} ")
    if "--local" in text and verb != "create":
        local = next(line for line in text.splitlines() if "--local" in line)
        assert "Run every component" not in local, verb


def test_version(tmp_path: Path) -> None:
    res = run("--version", home=tmp_path)
    assert res.returncode == 0
    assert res.stdout.startswith("surreal-kube ")


def test_help_paragraphs_are_not_hard_wrapped_mid_sentence(tmp_path: Path) -> None:
    narrow = run("list", "--help", home=tmp_path, extra={"COLUMNS": "200"}).stdout
    # at 200 columns a paragraph is one line: the docstring's own line breaks do not survive
    assert any(
        line.strip().startswith("Local: phase, age, env steps") and "GPUs" in line
        for line in narrow.splitlines()
    )


# ------------------------------------------------------------ 12: smaller


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    res = run("config", "exp", "--algoritm", "ppo", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: no such option: --algoritm; did you mean --algorithm? "
        "(see 'surreal-kube config --help')"
    )
    res = run("config", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == "error: missing argument 'NAME' (see 'surreal-kube config --help')"


def test_kube_flags_with_local_are_refused(tmp_path: Path) -> None:
    res = run("status", "exp", "--local", "-n", "rl", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: --local and --namespace contradict each other")
    res = run("create", "exp", "--local", "--direct", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == "error: --direct is a cluster option; drop it with --local"


def test_scale_validates_before_reading_the_kubeconfig(tmp_path: Path) -> None:
    res = run(
        "scale", "exp", "--agents", "0", "--kubeconfig", str(tmp_path / "nope"), home=tmp_path
    )
    assert res.returncode == 2
    assert res.stderr.strip() == "error: --agents: must be >= 1, got 0"


def test_logs_suggests_the_process_meant(tmp_path: Path) -> None:
    fake_local_experiment(tmp_path / "exps", "exp-l")
    res = run("logs", "exp-l", "lerner", "--local", home=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == "error: no process 'lerner' in exp-l; did you mean 'learner'?"


# ------------------------------------------------------------ 12: real runs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_tb_on_a_second_port_keeps_the_first_and_delete_stops_both(tmp_path: Path) -> None:
    fake_local_experiment(tmp_path / "exps", "exp-tb")
    first, second = free_port(), free_port()
    try:
        res = run("tb", "exp-tb", "--local", "--port", str(first), home=tmp_path)
        assert res.returncode == 0, res.stderr
        assert res.stdout == f"http://127.0.0.1:{first}/\n"
        res = run("tb", "exp-tb", "--local", "--port", str(second), home=tmp_path)
        assert res.returncode == 0, res.stderr
        assert listening(first) and listening(second)  # the earlier one was not killed
        res = run("tb", "exp-tb", "--local", home=tmp_path)
        assert res.stdout in (f"http://127.0.0.1:{first}/\n", f"http://127.0.0.1:{second}/\n")
    finally:
        res = run("delete", "exp-tb", "--local", "--yes", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not listening(first) and not listening(second)


@pytest.mark.slow
def test_create_in_a_pipe_prints_whole_lines_and_the_curve_once(tmp_path: Path) -> None:
    root = tmp_path / "exps"
    args = ["--algorithm", "ppo", "--env", "gym:CartPole-v1", "--num-agents", "1",
            "--num-evals", "1", "--max-env-steps", "1500", "--set", "evals.intervalSeconds=2"]  # fmt: skip
    res = run("create", "exp-pipe", "--root", str(root), *args, home=tmp_path,
              extra={"COLUMNS": "80"})  # fmt: skip
    try:
        assert res.returncode == 0, res.stderr[-3000:]
        picture = root.resolve() / "exp-pipe" / "results" / "learning_curve.png"
        assert res.stdout == f"{picture}\n"  # the result, once, for scripts
        assert str(picture) not in res.stderr  # not a second time on stderr
        lines = res.stderr.splitlines()
        summary = [line for line in lines if line.startswith("exp-pipe: succeeded")]
        assert len(summary) == 1, res.stderr[-3000:]
        assert summary[0].endswith(f"; results in {picture.parent}")  # whole, not cut at 80
        assert "exp-pipe: Running" in lines  # phase changes as whole lines, no live view
        assert not any(line.count("exp-pipe:") > 1 for line in lines)  # no two lines joined
        assert "\x1b[" not in res.stderr  # no cursor movement or colours in a pipe
    finally:
        run("delete", "exp-pipe", "--root", str(root), "--yes", home=tmp_path)


def test_start_up_imports_no_models_no_rich() -> None:
    """`--help` stays fast (bench/cli.py measures it): the CLI's modules load nothing heavy."""
    probe = (
        "import sys; from surreal_kube.cli import main; "
        "print(','.join(m for m in ('rich', 'pydantic', 'yaml', 'kubernetes', 'torch') "
        "if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "", res.stdout + res.stderr


@pytest.mark.slow
def test_detached_create_hints_find_it_again(tmp_path: Path) -> None:
    root = tmp_path / "elsewhere"
    args = ["--algorithm", "ppo", "--env", "gym:CartPole-v1", "--num-agents", "1",
            "--num-evals", "1", "--max-env-steps", "50000000"]  # fmt: skip
    res = run("create", "exp-bg", "--root", str(root), "--detach", *args, home=tmp_path)
    try:
        assert res.returncode == 0, res.stderr
        hints = [line.strip() for line in res.stderr.splitlines() if line.startswith("  ")]
        assert f"surreal-kube status exp-bg --root {root}" in hints
        assert f"surreal-kube delete exp-bg --root {root}" in hints
        # a hint works as printed (status reads the same root)
        status = run("status", "exp-bg", "--root", str(root), "-o", "name", home=tmp_path)
        assert status.returncode == 0 and status.stdout == "exp-bg\n", status.stderr
    finally:
        done = run("delete", "exp-bg", "--root", str(root), "--yes", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "stopping exp-bg (supervisor pid" in done.stderr
    assert done.stderr.strip().endswith("deleted exp-bg")
    assert not (root / "exp-bg").exists()
