"""Scoring one finished rollout: parse, check the rules, combine the components with the spec's weights."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from searchrl.metrics import all_metrics
from searchrl.protocols import get_protocol
from searchrl.reward import search_r1
from searchrl.reward.components import answer_score, format_valid, format_violated, search_well_formed
from searchrl.reward.format_rules import ParsedSolution, context_from_metadata, find_violations
from searchrl.reward.router_r1 import score_router_r1
from searchrl.reward.spec import RewardSpec


def solution_parser(protocol: str) -> Callable[[str], ParsedSolution]:
    """How the project's own formula parses a solution in the protocol it reads (reward.protocol)."""
    parse = get_protocol(protocol).parse_solution
    if parse is None:  # the spec's check (protocols_of) refuses such a pairing before a score is asked
        raise ValueError(f"reward.protocol {protocol}: formula searchrl has no parse of its solutions")
    return parse


@dataclass(frozen=True)
class SampleScore:
    reward: float
    score: float
    logs: dict[str, float]


def correctness(spec: RewardSpec, answer: float, searched: float, formatted: float) -> float:
    """The `scores` OpenRLHF's dynamic filter averages per prompt group: whether the sample did what
    the stage teaches. A rescaled reward would let groups that are all well formed but wrong (zero
    advantage) pass the filter. With an answer term: the answer metric; without (stage 1): searched
    with well-formed blocks and no format violation."""
    if spec.answer_weight != 0:
        return answer
    return searched * formatted


def score_search_r1(sequence: str, golds: Sequence[str], spec: RewardSpec) -> SampleScore:
    """Search-R1's reward of the whole decoded sequence (prompt included), with what it read logged."""
    r = search_r1.read(sequence, golds)
    if spec.formula == "search_r1_em":
        reward = search_r1.paid_em(r, spec.format_score)
    else:
        reward = search_r1.paid_em_format(
            r, spec.structure_format_score, spec.final_format_score, spec.retrieval_score
        )
    logs = {
        "em": float(r.right),
        "has_answer": float(r.answer is not None),
        "format_ok": float(r.formatted),
        "retrieval_gold": float(r.retrieval_gold),
    }
    return SampleScore(reward=reward, score=float(r.right), logs=logs)


def score_solution(
    solution: str, golds: Sequence[str], spec: RewardSpec, metadata: Mapping[str, Any] | None = None
) -> SampleScore:
    if spec.formula == "router_r1":
        return SampleScore(*score_router_r1(solution, golds, spec, metadata))
    if spec.search_r1:
        return score_search_r1(solution, golds, spec)
    parsed = solution_parser(spec.reads)(solution.strip())
    violations = find_violations(
        parsed, context_from_metadata(metadata, spec.max_answer_words, spec.check_cjk, spec.role_leakage_scope)
    )
    metrics = all_metrics(parsed.answer, golds) if parsed.answer is not None else None
    answer = answer_score(metrics, spec.answer_metric)
    searched = search_well_formed(parsed, violations)
    formatted = format_valid(violations, spec.format_rules)
    penalised = format_violated(violations, spec.penalty_rules)

    reward = (
        spec.answer_weight * answer
        + spec.answer_bias
        + spec.search_weight * searched
        + spec.format_weight * formatted
        - spec.violation_penalty * penalised
    )
    score = correctness(spec, answer, searched, formatted)

    # The queries are counted from the text only when the environment did not say.
    searches = (metadata or {}).get("num_searches")
    logs = {
        "format_ok": float(not any(violations.values())),
        "search_ok": searched,
        "has_answer": float(parsed.answer is not None),
        "answer_words": float(len(parsed.answer.split())) if parsed.answer is not None else 0.0,
        "num_searches": float(searches) if type(searches) is int else float(parsed.num_searches),
        **(metrics or dict.fromkeys(("em", "f1", "cem"), 0.0)),
        **{f"violation_{name}": float(hit) for name, hit in violations.items()},
    }
    return SampleScore(reward=reward, score=score, logs=logs)
