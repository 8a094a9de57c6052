"""Format violations, one small pure function per rule (R1-Searcher's rules plus forged documents), read from a
solution as its protocol parses it.

Each rule answers "is this solution in violation?"; the rewards combine them with explicit weights
and every rule's verdict is logged on its own, so a collapse can be traced to the rule that fired.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

_CJK = re.compile("[\u4e00-\u9fff]")


class ParsedSolution(Protocol):
    """What the rules read of a solution, as each protocol the project's own reward reads parses it
    (searchrl.protocols.r1_searcher.parse_solution, searchrl.protocols.search_r1.parse_solution,
    searchrl.protocols.tool_call.parse_solution)."""

    text: str
    answer_opens: int
    answer_closes: int
    answer: str | None
    # Tags whose presence inside the answer means the model stuffed the protocol into it.
    ANSWER_FORBIDDEN: tuple[str, ...]

    @property
    def searched(self) -> bool: ...
    @property
    def blocks_balanced(self) -> bool: ...
    @property
    def structure_ok(self) -> bool: ...
    @property
    def outside_documents(self) -> str: ...
    @property
    def num_document_blocks(self) -> int: ...
    @property
    def num_searches(self) -> int: ...
    # The tool-call protocol's calls that are no search (not JSON, another function, no query); empty elsewhere.
    @property
    def call_problems(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class FormatContext:
    """What the rules need beyond the text: limits from config and what the environment reported."""

    max_answer_words: int = 10
    check_cjk: bool = True
    num_searches: int | None = None
    # "policy": the policy's own text only; "solution": retrieved documents too, as R1-Searcher's reward does.
    role_leakage_scope: str = "policy"


def tag_counts(p: ParsedSolution, ctx: FormatContext) -> bool:
    return not p.blocks_balanced


def think(p: ParsedSolution, ctx: FormatContext) -> bool:
    # R1-Searcher's: the prompt's `<think>` closed once, none opened; Search-R1's: its v0.3 walk over the response.
    return not p.structure_ok


def answer_count(p: ParsedSolution, ctx: FormatContext) -> bool:
    return not (p.answer_opens == 1 and p.answer_closes == 1)


def tags_in_answer(p: ParsedSolution, ctx: FormatContext) -> bool:
    return p.answer is not None and any(tag in p.answer for tag in p.ANSWER_FORBIDDEN)


def answer_too_long(p: ParsedSolution, ctx: FormatContext) -> bool:
    return p.answer is not None and len(p.answer.split()) > ctx.max_answer_words


def role_leakage(p: ParsedSolution, ctx: FormatContext) -> bool:
    # A retrieved passage that mentions an assistant is not the policy leaking a role, so by default only the
    # policy's own text is read. One scan for the shared tail instead of one per spelling: this runs per sample.
    text = p.text if ctx.role_leakage_scope == "solution" else p.outside_documents
    at = text.find("ssistant")
    while at >= 0:
        if at > 0 and text[at - 1] in "Aa":
            return True
        at = text.find("ssistant", at + 1)
    return False


def cjk(p: ParsedSolution, ctx: FormatContext) -> bool:
    # isascii() is O(1): most texts, or the model's part of them, skip the character scan.
    if not ctx.check_cjk or p.text.isascii() or p.outside_documents.isascii():
        return False
    return _CJK.search(p.outside_documents) is not None


def forged_documents(p: ParsedSolution, ctx: FormatContext) -> bool:
    # Only the environment knows how many searches really ran; more document blocks than that
    # means the model typed documents itself.
    return ctx.num_searches is not None and p.num_document_blocks > ctx.num_searches


def tool_call(p: ParsedSolution, ctx: FormatContext) -> bool:
    # A malformed call searches nothing and ends the episode; without a rule of its own it would pass as a
    # solution that merely did not search.
    return bool(p.call_problems)


RULES: dict[str, Callable[[ParsedSolution, FormatContext], bool]] = {
    "tag_counts": tag_counts,
    "think": think,
    "answer_count": answer_count,
    "tags_in_answer": tags_in_answer,
    "answer_too_long": answer_too_long,
    "role_leakage": role_leakage,
    "cjk": cjk,
    "forged_documents": forged_documents,
    "tool_call": tool_call,
}


def find_violations(p: ParsedSolution, ctx: FormatContext) -> dict[str, bool]:
    """Every rule's verdict, keyed by rule name (True = violated)."""
    return {name: rule(p, ctx) for name, rule in RULES.items()}


def context_from_metadata(
    metadata: Mapping[str, Any] | None, max_answer_words: int, check_cjk: bool, role_leakage_scope: str = "policy"
) -> FormatContext:
    """The rules' context; a num_searches that is not a finite count >= 0 counts as not reported."""
    searches = (metadata or {}).get("num_searches")
    valid = isinstance(searches, int | float) and not isinstance(searches, bool) and 0 <= searches < float("inf")
    return _context(max_answer_words, check_cjk, int(searches) if valid else None, role_leakage_scope)


# Contexts repeat (a few limits, a few search counts); the reward server builds one per scored sample.
@lru_cache(maxsize=1024)
def _context(
    max_answer_words: int, check_cjk: bool, num_searches: int | None, role_leakage_scope: str
) -> FormatContext:
    return FormatContext(max_answer_words, check_cjk, num_searches, role_leakage_scope)
