"""The CLI as a person uses it: exit codes, exact messages, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SK = [sys.executable, "-m", "surreal_kube.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SK, *args], capture_output=True, text=True, timeout=60)


def test_config_round_trips_byte_for_byte(tmp_path: Path) -> None:
    first = cli("config", "exp-ppo-ant", "--algorithm", "ppo", "--env", "gym:Ant-v5", "-o", "yaml")
    assert first.returncode == 0, first.stderr
    doc = yaml.safe_load(first.stdout)
    assert doc["metadata"]["name"] == "exp-ppo-ant"
    assert doc["spec"]["env"]["id"] == "gym:Ant-v5"
    assert doc["spec"]["algorithm"]["name"] == "ppo"
    spec_file = tmp_path / "exp.yaml"
    spec_file.write_text(first.stdout)
    second = cli("config", "exp-ppo-ant", "-f", str(spec_file), "-o", "yaml")
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout


def test_config_json() -> None:
    res = cli("config", "exp", "-a", "ddpg", "--num-agents", "4", "-o", "json")
    assert res.returncode == 0
    doc = json.loads(res.stdout)
    assert doc["spec"]["algorithm"]["name"] == "ddpg" and doc["spec"]["agents"]["count"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["config", "exp_ppo.Ant"],
            "error: invalid experiment name 'exp_ppo.Ant': a DNS-1035 label may contain only lowercase letters, digits and '-', found '.' 'A' '_'; try 'exp-ppo-ant'",
        ),
        (["config", "exp", "--num-agents", "0"], "error: spec.agents.count: must be >= 1, got 0"),
        (
            ["config", "exp", "--set", "agents.cuont=2"],
            "error: spec.agents.cuont: unknown key 'cuont'; did you mean 'count'?",
        ),
        (
            ["config", "exp", "--num-agents", "6", "--agent-batch", "4"],
            "error: spec.agents.batch: must divide agents.count (6), got 4: every agent process (pod) runs the same number of agents",
        ),
        (
            ["config", "exp", "-f", "/no/such.yaml"],
            "error: spec file '/no/such.yaml' does not exist",
        ),
        (
            ["config", "exp", "--set", "agents.count=two"],
            "error: spec.agents.count: must be an integer, got 'two'",
        ),
        (
            ["topology", "exp", "--num-agents", "-1"],
            "error: spec.agents.count: must be >= 1, got -1",
        ),
        (
            ["create", "exp", "--dry-run", "-a", "sac"],
            "error: spec.algorithm.name: unknown algorithm 'sac'; valid: ppo, ddpg",
        ),
    ],
)
def test_bad_input_exits_2_with_one_clear_line(args: list[str], message: str) -> None:
    res = cli(*args)
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.strip() == message
    assert "Traceback" not in res.stderr


def test_invalid_yaml_exit_2_with_position(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec:\n  agents: {count: 2\n")
    res = cli("config", "exp", "-f", str(bad))
    assert res.returncode == 2
    assert res.stderr.startswith(f"error: {bad}: invalid YAML at line 3, column 1")
    assert "Traceback" not in res.stderr


def test_wrong_type_in_file(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("spec:\n  agents:\n    count: [1]\n")
    res = cli("config", "exp", "-f", str(f))
    assert res.returncode == 2
    assert res.stderr.strip() == "error: spec.agents.count: must be an integer, got [1]"


def test_usage_error_exit_2() -> None:
    res = cli("config", "exp", "--output", "xml")
    assert res.returncode == 2
    assert res.stderr == "error: --output 'xml': unknown format; valid: json, yaml, name\n"


def test_topology_json_lists_every_process() -> None:
    res = cli(
        "topology",
        "exp",
        "--num-agents",
        "8",
        "--agent-batch",
        "4",
        "--num-evals",
        "2",
        "-o",
        "json",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["process"] for r in rows][-4:] == ["agents-0", "agents-1", "evals-0", "evals-1"]
    assert rows[-4]["agentIds"] == [0, 1, 2, 3]


def test_topology_table() -> None:
    res = cli("topology", "exp", "--num-agents", "2")
    assert res.returncode == 0
    for name in ("learner", "replay-shard-0", "ps-shard-0", "agents-1", "evals-0", "tensorboard"):
        assert name in res.stdout


def test_create_dry_run_starts_nothing_and_prints_the_plan() -> None:
    res = cli("create", "exp-ppo-ant", "--dry-run", "--local", "--num-agents", "2")
    assert res.returncode == 0, res.stderr
    assert "# would start on local processes:" in res.stdout
    assert "# agents-1: surreal-kube-role agents --id 1 agents [1]" in res.stdout


def test_a_local_dry_run_shows_agents_packed_within_the_cores() -> None:
    from surreal_kube.launch.local.backend import available_cores, pack_agents

    batch = pack_agents(8, available_cores())
    res = cli("create", "exp-ppo-ant", "--dry-run", "--local", "--num-agents", "8")
    assert res.returncode == 0, res.stderr
    assert f"    batch: {batch}\n" in res.stdout  # the spec that will run says it
    first = list(range(batch))
    assert f"# agents-0: surreal-kube-role agents --id 0 agents {first}" in res.stdout
    assert f"agents-{8 // batch}:" not in res.stdout

    topo = cli("topology", "exp", "--num-agents", "8")
    assert "agents-7" in topo.stdout  # Kubernetes: one agent a pod
    if batch > 1:
        assert f"`create --local` runs {batch} agents a process" in topo.stderr


@pytest.mark.parametrize("verb", ["create", "config", "topology"])
def test_help_has_examples(verb: str) -> None:
    res = cli(verb, "--help")
    assert res.returncode == 0
    assert "Examples" in res.stdout


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from surreal_kube.cli import main; "
        "heavy = [m for m in ('torch', 'zmq', 'kubernetes', 'gymnasium') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == ""
