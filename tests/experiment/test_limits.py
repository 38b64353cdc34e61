"""Large or hostile spec input: refused in one line (exit 2) or accepted within bounded memory.

Each case here failed before the loader had limits: a deep document or an alias chain raised
RecursionError ("unexpected", exit 1) or ran out of time and memory, a 5 MB file was parsed whole.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from surreal_kube.errors import SpecError
from surreal_kube.experiment.resolve import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_SETS,
    MAX_SPEC_BYTES,
    load_yaml_text,
    resolve_experiment,
)

SK = [sys.executable, "-m", "surreal_kube.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SK, *args], capture_output=True, text=True, timeout=120)


def laughs(levels: int = 9, width: int = 9) -> str:
    """The billion-laughs document: each anchor is a list of `width` aliases of the previous."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"spec: {{env: {{kwargs: {{x: *a{levels}}}}}}}")
    return "\n".join(lines) + "\n"


def assert_one_line_exit_2(res: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    for part in parts:
        assert part in lines[0]
    assert "Traceback" not in res.stderr and "unexpected" not in res.stderr


def test_billion_laughs_file_is_refused_naming_the_limit(tmp_path: Path) -> None:
    f = tmp_path / "laughs.yaml"
    f.write_text(laughs())
    res = cli("config", "exp", "-f", str(f))
    assert_one_line_exit_2(
        res, str(f), f"more than {MAX_NODES:,} values with aliases expanded (the limit)", "line "
    )


def test_billion_laughs_costs_little_memory() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(SpecError, match="with aliases expanded"):
            load_yaml_text(laughs(), "laughs.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_small_aliases_still_work() -> None:
    text = "x: &r {cpu: 500m, memory: 1Gi}\nspec:\n  resources: {agent: *r, eval: *r}\n"
    doc = load_yaml_text(text, "f.yaml")
    assert doc["spec"]["resources"]["eval"] == {"cpu": "500m", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spec: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than 32 levels"),
        (
            "spec:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)),
            "nested deeper than 32 levels",
        ),
        (
            # every anchor is shallow, the expansion is deep
            "a: &a [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]\n"
            "b: &b [[[[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]]\n"
            "spec: {env: {kwargs: {x: *b}}}\n",
            "nested deeper than 32 levels through aliases",
        ),
    ],
    ids=["flow", "block", "aliases"],
)
def test_deep_nesting_is_refused_not_a_recursion_error(
    tmp_path: Path, text: str, message: str
) -> None:
    f = tmp_path / "deep.yaml"
    f.write_text(text)
    assert_one_line_exit_2(cli("config", "exp", "-f", str(f)), message, "(the limit)")
    assert MAX_DEPTH == 32


def test_a_file_of_megabytes_is_refused_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    f.write_text("# " + "x" * (5 << 20) + "\nspec: {agents: {count: 4}}\n")
    assert_one_line_exit_2(
        cli("config", "exp", "-f", str(f)),
        f"spec file '{f}' is 5.0 MiB, too large",
        f"the limit is {MAX_SPEC_BYTES >> 20} MiB",
    )


def test_many_values_under_the_byte_limit_are_refused_by_count(tmp_path: Path) -> None:
    f = tmp_path / "wide.yaml"
    f.write_text(
        "spec:\n  env:\n    kwargs:\n" + "".join(f"      k{i}: {i}\n" for i in range(40_000))
    )
    assert f.stat().st_size < MAX_SPEC_BYTES
    assert_one_line_exit_2(cli("config", "exp", "-f", str(f)), f"more than {MAX_NODES:,} values")


def test_an_integer_of_100000_digits_is_a_spec_error(tmp_path: Path) -> None:
    f = tmp_path / "int.yaml"
    f.write_text("spec: {agents: {count: " + "9" * 100_000 + "}}\n")
    assert_one_line_exit_2(cli("config", "exp", "-f", str(f)), str(f), "digits")


def test_ten_thousand_sets_are_accepted_within_bounded_memory() -> None:
    sets = [f"agents.count={i + 1}" for i in range(MAX_SETS)]
    tracemalloc.start()
    try:
        exp = resolve_experiment("exp", sets=sets)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exp.spec.agents.count == MAX_SETS
    assert peak < 256 << 20


def test_a_map_past_its_size_is_refused_naming_field_and_limit() -> None:
    sets = [f"env.kwargs.k{i}={i}" for i in range(70)]
    with pytest.raises(SpecError, match=r"^spec.env.kwargs: must have at most 64 entries, got 70$"):
        resolve_experiment("exp", sets=sets)


def test_more_sets_than_the_limit_are_refused() -> None:
    with pytest.raises(SpecError, match=r"^--set: 10,001 assignments given; the limit is 10,000$"):
        resolve_experiment("exp", sets=["agents.count=2"] * (MAX_SETS + 1))


def test_hostile_set_values_and_keys_are_refused_in_one_line() -> None:
    value = "{a: &a [1,1,1,1,1,1,1,1,1,1], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], " + (
        "c: &c [" + ",".join(["*b"] * 10) + "], d: [" + ",".join(["*c"] * 30) + "]}"
    )
    assert_one_line_exit_2(
        cli("config", "exp", "--set", f"env.kwargs={value}"), "--set env.kwargs: more than"
    )
    key = ".".join(["a"] * 100)
    assert_one_line_exit_2(
        cli("config", "exp", "--set", f"{key}=1"), "the key has 100 segments; the limit is 32"
    )
