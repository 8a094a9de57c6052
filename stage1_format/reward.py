"""Stage-1 reward components: did the model search, and is its output well formed.

The answer's content plays no part here; stage 1 only teaches the model to call search.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rollout.protocol import ParsedSolution


def search_well_formed(parsed: ParsedSolution, violations: Mapping[str, bool]) -> float:
    """1 when the model searched at least once and every query/documents block is well formed."""
    ok = parsed.tag_counts["begin_of_query"] >= 1 and not violations["tag_counts"]
    return float(ok and not violations["forged_documents"])


def format_valid(violations: Mapping[str, bool], rules: Iterable[str]) -> float:
    """1 when none of the given rules is violated."""
    return float(not any(violations[name] for name in rules))
