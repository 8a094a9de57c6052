"""The reward's components, one small pure function each, in the order the method adds them.

Stage 1 teaches the model to call search: `search` (it searched, every query/documents block well formed)
and `format` (no format rule broken). Stage 2 builds on stage 1's format rules: `answer` (the answer metric)
and `violation` (any broken rule costs the penalty). The options beyond R1-Searcher are `process` (a share
of the way to the best reward when a search brought a gold answer into view), `efficiency` (fewer searches
among a group's correct samples) and `cost` (the episode's search spend); the agent computes those three,
with the spec's weights, through this package. searchrl/reward/spec.py names every component with its weight;
scoring.py and group.py combine them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from searchrl.metrics import YES_NO, normalize_answer
from searchrl.reward.format_rules import ParsedSolution

_YES_NO = frozenset(YES_NO)


def search_well_formed(parsed: ParsedSolution, violations: Mapping[str, bool]) -> float:
    """1 when the model searched at least once and every query/documents block is well formed.

    >>> from searchrl.protocols.r1_searcher import parse_solution
    >>> ok = dict.fromkeys(("tag_counts", "forged_documents"), False)
    >>> searched = parse_solution("<|begin_of_query|> q <|end_of_query|>")
    >>> search_well_formed(searched, ok), search_well_formed(parse_solution("no search"), ok)
    (1.0, 0.0)
    >>> search_well_formed(searched, {**ok, "forged_documents": True})
    0.0
    """
    ok = parsed.searched and not violations["tag_counts"]
    return float(ok and not violations["forged_documents"])


def format_valid(violations: Mapping[str, bool], rules: Iterable[str]) -> float:
    """1 when none of the given rules is violated.

    >>> format_valid({"think": False, "cjk": True}, ["think"]), format_valid({"think": False, "cjk": True}, ["cjk"])
    (1.0, 0.0)
    """
    return float(not any(violations[name] for name in rules))


def format_violated(violations: Mapping[str, bool], rules: Iterable[str]) -> float:
    """1 when any of the given rules is violated: the same format rules, from the penalty's side.

    >>> format_violated({"think": False, "cjk": True}, ["think", "cjk"]), format_violated({"think": False}, ["think"])
    (1.0, 0.0)
    """
    return float(any(violations[name] for name in rules))


def answer_score(answer_metrics: Mapping[str, float] | None, metric: str) -> float:
    """The chosen answer metric (em, f1 or cem, best over the golds); 0 when there is no answer.

    >>> answer_score({"em": 0.0, "f1": 0.5, "cem": 1.0}, "f1"), answer_score(None, "em")
    (0.5, 0.0)
    """
    if answer_metrics is None:
        return 0.0
    return answer_metrics[metric]


def evidence_golds(golds: Iterable[str]) -> list[str]:
    """The normalised golds a passage can hold as evidence. Yes/no golds are judgements, not text to find:
    "No. 1 single" normalises to hold "no", so any search would count.

    >>> evidence_golds(["The Beatles", "no", "Yes", "True"])
    ['beatles']
    """
    return [g for g in (normalize_answer(gold) for gold in golds) if g and g not in _YES_NO]


def documents_contain(texts: list[str], evidence: list[str]) -> bool:
    """Whether any evidence gold (see `evidence_golds`) appears, as whole normalised tokens, in the texts.

    >>> documents_contain(["Paris is the capital of France."], evidence_golds(["Paris"]))
    True
    >>> documents_contain(["Parisian cafés"], ["paris"]), documents_contain(["No. 1 single"], evidence_golds(["no"]))
    (False, False)
    """
    if not evidence or not texts:
        return False
    haystack = f" {normalize_answer(' '.join(texts))} "
    return any(f" {g} " in haystack for g in evidence)


def process_reward(weight: float, found: bool, reward: float, best: float, violated: bool) -> float:
    """The process term of an episode: `weight` (< 1) of the gap between its reward and the best reward the
    spec gives, when a search brought a gold answer into view and no format rule was broken. A right answer
    (reward == best) gets nothing more, a wrong one at most `weight` of the way up: the term can never lift a
    sample to, let alone above, a right one (Agent-R1's per-call rewards, bounded by the outcome).

    >>> process_reward(0.5, True, 0.0, 1.0, False), process_reward(0.5, True, 1.0, 1.0, False)
    (0.5, 0.0)
    >>> process_reward(0.5, True, -2.0, 1.0, True), process_reward(0.5, False, 0.0, 1.0, False)
    (0.0, 0.0)
    """
    if not found or violated:
        return 0.0
    return weight * max(0.0, best - reward)


def efficiency_bonuses(searches: list[int], correct: list[bool], weight: float) -> list[float]:
    """`weight` for the correct samples with the fewest searches, 0 for the most, linear between;
    nothing for wrong samples, nor when every correct sample searched equally often (R1-Searcher++).

    >>> efficiency_bonuses([1, 2, 3, 1], [True, True, True, False], 0.6)
    [0.6, 0.3, 0.0, 0.0]
    >>> efficiency_bonuses([2, 2], [True, True], 0.6)
    [0.0, 0.0]
    """
    counts = [s for s, ok in zip(searches, correct, strict=True) if ok]
    if not counts or min(counts) == max(counts):
        return [0.0] * len(searches)
    low, high = min(counts), max(counts)
    return [weight * (high - s) / (high - low) if ok else 0.0 for s, ok in zip(searches, correct, strict=True)]


def cost_penalty(weight: float, cost: float, recent: Iterable[float]) -> float:
    """`weight` x the episode's search cost over the largest recent cost (this one included): the weight
    means the same whether the pool's prices are cents or dollars (Router-R1's idea).

    >>> cost_penalty(0.5, 2.0, [1.0, 4.0]), cost_penalty(0.5, 0.0, [0.0])
    (0.25, 0.0)
    """
    top = max([cost, *recent])
    return weight * cost / top if top > 0 else 0.0
