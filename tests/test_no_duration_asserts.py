"""No test asserts a duration (issue 26): on a shared 2-core machine a bound on wall-clock time
is a benchmark in disguise that fails when the machine is busy, not when the code is wrong.

A test waits on the event it needs (a log line, a status, an exit) and leaves "how fast" to a
benchmark row under `bench/`. What is flagged here, by reading every test module's syntax tree:
an `assert` that compares a clock reading (`time.monotonic()`, `perf_counter()`, `time()`, ...)
or a name computed from one in the same function, or a name that says it holds a duration
(`took`, `elapsed`, `wall_seconds`, ...). Allowed: `time.monotonic() < deadline`, the guard of a
loop that waits for an event until its deadline, and the tests named in `SHARES`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = frozenset(
    {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}
)
DURATION_NAME = re.compile(r"^(took|elapsed|duration|wall_seconds|startup_seconds)$")
DEADLINE_NAME = re.compile(r"(deadline|end|until|stop_at)$")
SHARES = {
    "test_applied_directly_the_wait_takes_a_bounded_share_of_a_core": (
        "a share of a core (CPU-seconds of fixed-cost work per second of wall time), not a "
        "duration: a busy machine only stretches the wall time, so it only lowers the share"
    ),
    "test_a_wall_clock_step_neither_ends_the_run_nor_counts_in_its_time": (
        "a timestamp after a deliberate step of the wall clock: the step is the event, and a "
        "status written after it carries the stepped time however slow the machine"
    ),
    "test_random_kills_stops_and_a_clock_step_end_the_run_once_with_results": (
        "the same stepped timestamp, and a run time below the day of the step; the folder and "
        "the iterations it reads descend from the stepped environment, not from a duration"
    ),
}
"""Tests that read a clock for something other than a duration, each with why a loaded machine
cannot fail it."""


def _is_clock_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _clock_derived(func: ast.AST) -> set[str]:
    """Local names assigned (directly or through another such name) from a clock reading."""
    tainted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(func):
            if not isinstance(node, ast.Assign):
                continue
            value = node.value
            if any(_is_clock_call(s) for s in ast.walk(value)) or _names(value) & tainted:
                for target in node.targets:
                    new = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} - tainted
                    if new:
                        tainted |= new
                        changed = True
    return tainted


def _deadline_guard(compare: ast.Compare) -> bool:
    """`time.monotonic() < deadline`: the timeout of an event wait, not a measured duration."""
    if len(compare.ops) != 1 or not isinstance(compare.ops[0], ast.Lt | ast.LtE):
        return False
    right = compare.comparators[0]
    return (
        _is_clock_call(compare.left)
        and isinstance(right, ast.Name)
        and bool(DEADLINE_NAME.search(right.id))
    )


def duration_asserts(source: str, filename: str = "<test>") -> list[str]:
    """`file:line: comparison` for every assertion of a duration in the module's source."""
    tree = ast.parse(source, filename)
    found: list[str] = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or func.name in SHARES:
            continue
        tainted = _clock_derived(func)
        for node in ast.walk(func):
            if not isinstance(node, ast.Assert):
                continue
            for compare in ast.walk(node.test):
                if not isinstance(compare, ast.Compare) or _deadline_guard(compare):
                    continue
                if not any(
                    isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in compare.ops
                ):
                    continue
                operands = [compare.left, *compare.comparators]
                clocked = any(_is_clock_call(s) for o in operands for s in ast.walk(o))
                names = set().union(*(_names(o) for o in operands))
                if clocked or names & tainted or any(DURATION_NAME.match(n) for n in names):
                    found.append(f"{filename}:{node.lineno}: {ast.unparse(compare)}")
    return list(dict.fromkeys(found))


def test_no_test_asserts_a_duration() -> None:
    found: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        found += duration_asserts(path.read_text(), str(path.relative_to(TESTS.parent)))
    assert found == [], "\n".join(found)


def test_the_check_sees_each_form_of_a_duration_bound() -> None:
    source = """
def test_a(run):
    started = time.monotonic()
    run()
    first = time.monotonic() - started
    assert 0.2 < first < 2.0
    assert time.perf_counter() - started < 10
    code, took = run.terminate("x")
    assert code == 0 and took < 5
    assert result.wall_seconds < 5.0
    deadline = time.monotonic() + 10
    while not run.done():
        assert time.monotonic() < deadline, "never done"
    assert run.count >= 3
"""
    assert [line.split(": ", 1)[1] for line in duration_asserts(source)] == [
        "0.2 < first < 2.0",
        "time.perf_counter() - started < 10",
        "took < 5",
        "result.wall_seconds < 5.0",
    ]
