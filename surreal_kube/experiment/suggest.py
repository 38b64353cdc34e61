"""'Did you mean' suggestions for mistyped keys and values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest choice, or an empty string when none is close."""
    options = list(choices)
    lowered = {c.lower(): c for c in options}
    if word.lower() in lowered:
        return f"; did you mean {lowered[word.lower()]!r}?"
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
