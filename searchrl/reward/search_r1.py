"""Search-R1's two rewards, as its trainer computes them: on the whole decoded sequence, prompt included
(`verl/trainer/main_ppo.py` decodes prompt and response together and scores that).

- `em` (`qa_em.compute_score_em`, its v0.1-v0.2 scripts): `score` when the extracted answer matches a gold answer
  after SQuAD normalisation, `format_score` when it does not, 0 when no answer is extracted.
- `em_format` (`qa_em_format.compute_score_em`, its v0.3 scripts): the same answer check with the v0.3 format
  (`searchrl.protocols.search_r1.format_problem`) and whether an `<information>` block holds a gold answer:

      answer right:  score if the format holds, else score - structure_format_score
      otherwise:     structure_format_score (+ retrieval_score when a block holds a gold answer) if the format
                     holds; else final_format_score when an answer was extracted, 0 when none was

The answer extracted is the last `<answer>` block of the sequence when it holds two or more (the instruction's own
example is one of them), so a response that answers nothing is read as answering the instruction's example.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from searchrl.metrics import squad_em, squad_normalize
from searchrl.protocols.search_r1 import final_answer, format_problem, information_blocks


@dataclass(frozen=True)
class Reading:
    """What both rewards read of a sequence, read once: the extracted answer (None: none), whether it matches a gold
    answer, whether the v0.3 format holds, and whether an `<information>` block holds a gold answer."""

    answer: str | None
    right: bool
    formatted: bool
    retrieval_gold: bool


def read(sequence: str, golds: Sequence[str]) -> Reading:
    answer = final_answer(sequence)
    return Reading(
        answer=answer,
        right=answer is not None and bool(squad_em(answer, golds)),
        formatted=format_problem(sequence) is None,
        retrieval_gold=retrieval_holds_gold(sequence, golds),
    )


def retrieval_holds_gold(sequence: str, golds: Sequence[str]) -> bool:
    """Whether an `<information>` block holds a gold answer, both SQuAD-normalised, as a substring."""
    wanted = [squad_normalize(g) for g in golds]
    return any(g in squad_normalize(block) for block in information_blocks(sequence) for g in wanted)


def paid_em(r: Reading, format_score: float = 0.0, score: float = 1.0) -> float:
    if r.answer is None:
        return 0.0
    return score if r.right else format_score


def paid_em_format(
    r: Reading,
    structure_format_score: float = 0.0,
    final_format_score: float = 0.0,
    retrieval_score: float = 0.0,
    score: float = 1.0,
) -> float:
    if r.right:
        return score if r.formatted else score - structure_format_score
    if r.formatted:
        return structure_format_score + retrieval_score if r.retrieval_gold else structure_format_score
    return 0.0 if r.answer is None else final_format_score


def em(sequence: str, golds: Sequence[str], format_score: float = 0.0, score: float = 1.0) -> float:
    return paid_em(read(sequence, golds), format_score, score)


def em_format(
    sequence: str,
    golds: Sequence[str],
    structure_format_score: float = 0.0,
    final_format_score: float = 0.0,
    retrieval_score: float = 0.0,
    score: float = 1.0,
) -> float:
    r = read(sequence, golds)
    return paid_em_format(r, structure_format_score, final_format_score, retrieval_score, score)
