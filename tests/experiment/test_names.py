"""Experiment names: DNS-1035 rules, derived-name lengths and suggestions, table-driven."""

from __future__ import annotations

import pytest

from surreal_kube.errors import InvalidNameError, SpecError
from surreal_kube.experiment.names import suggest_name, validate_name
from surreal_kube.experiment.resolve import resolve_experiment

ACCEPT = [
    "a",
    "exp",
    "exp-ppo-ant",
    "exp1",
    "e-1-2-3",
    "abc123def",
    "x" * 39,
    "z9",
    "my--double",
]

# (name, fragment of the message the refusal must contain)
REFUSE = [
    ("", "must not be empty"),
    ("exp_ppo", "found '_'"),
    ("exp.ppo", "found '.'"),
    ("Exp", "found 'E'"),
    ("EXP-PPO", "found 'E' 'O' 'P' 'X'"),
    ("1exp", "must start with a lowercase letter, got '1'"),
    ("-exp", "must start with a lowercase letter, got '-'"),
    ("exp-", "must end with a letter or digit"),
    ("exp ppo", "found ' '"),
    ("expé", "found 'é'"),
    ("实验", "found"),
    ("exp/ppo", "found '/'"),
    ("exp:ppo", "found ':'"),
    ("exp@1", "found '@'"),
    ("exp\n", "found '\\n'"),
    ("a" * 64, "at most 63 characters, got 64"),
    ("a" * 100, "at most 63 characters, got 100"),
    ("9", "must start with a lowercase letter"),
    ("---", "must start with a lowercase letter, got '-'"),
    ("exp_ppo.Ant", "try 'exp-ppo-ant'"),
    ("a" * 63, "too long for this experiment"),
]


@pytest.mark.parametrize("name", ACCEPT)
def test_valid_names_are_accepted(name: str) -> None:
    assert resolve_experiment(name).metadata.name == name


@pytest.mark.parametrize(("name", "fragment"), REFUSE)
def test_invalid_names_are_refused_with_the_rule(name: str, fragment: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        resolve_experiment(name)
    message = str(info.value)
    assert fragment in message
    assert "try " in message or "e.g. " in message


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("exp_ppo.Ant", "exp-ppo-ant"),
        ("EXP PPO", "exp-ppo"),
        ("1exp", "exp-1exp"),
        ("-exp-", "exp"),
        ("expé", "expe"),
        ("", "exp"),
        ("___", "exp"),
        ("a" * 80, "a" * 63),
    ],
)
def test_suggestions_are_valid_labels(name: str, suggestion: str) -> None:
    assert suggest_name(name) == suggestion
    validate_name(suggest_name(name))


def test_exactly_63_characters_is_a_valid_label_but_64_is_not() -> None:
    validate_name("a" * 63)
    with pytest.raises(InvalidNameError, match="at most 63 characters, got 64"):
        validate_name("a" * 64)


def test_name_valid_alone_but_too_long_for_1000_agents() -> None:
    name = "a" * 50
    validate_name(name)  # a fine DNS label on its own
    with pytest.raises(SpecError) as info:
        resolve_experiment(name, flags={"agents.count": 1000})
    message = str(info.value)
    # the agents StatefulSet's pods carry `controller-revision-hash: <name>-agents-<10-char hash>`
    assert "too long for this experiment" in message
    assert "the agents StatefulSet's revision label" in message
    assert "would be 68 characters (limit 63)" in message
    assert "use at most 45 characters" in message
    # 45 characters fit, with the last pod `<name>-agents-999` at 56 characters
    exp = resolve_experiment("a" * 45, flags={"agents.count": 1000})
    assert exp.spec.agents.count == 1000


def test_the_longest_derived_name_decides() -> None:
    # 1000 agents in batches of 1: the last agents pod is `<name>-agents-999`, and the StatefulSet
    # revision label `<name>-agents-<10-char hash>` is longer still.
    with pytest.raises(InvalidNameError) as info:
        validate_name(
            "b" * 50, [("-agents-999", "the last agents pod"), ("-agents-xxxxxxxxxx", "rev")]
        )
    assert "'" + "b" * 50 + "-agents-xxxxxxxxxx'" in str(info.value)
    assert "use at most 45 characters" in str(info.value)
    validate_name("b" * 45, [("-agents-999", "pod"), ("-agents-xxxxxxxxxx", "rev")])


def test_names_are_never_rewritten() -> None:
    with pytest.raises(InvalidNameError):
        resolve_experiment("Exp-PPO")
