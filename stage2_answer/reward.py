"""Stage-2 reward components: how good is the answer, and was the format violated."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def answer_score(answer_metrics: Mapping[str, float] | None, metric: str) -> float:
    """The chosen answer metric (em, f1 or cem, best over the golds); 0 when there is no answer."""
    if answer_metrics is None:
        return 0.0
    return answer_metrics[metric]


def format_violated(violations: Mapping[str, bool], rules: Iterable[str]) -> float:
    """1 when any of the given rules is violated."""
    return float(any(violations[name] for name in rules))
