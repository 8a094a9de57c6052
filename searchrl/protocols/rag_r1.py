"""RAG-R1's tag protocol (inclusionAI/AgenticLearning, `RAG-R1/`): Search-R1's tags with several queries a search.

The policy writes `<search> query_1,query_2 </search>`; the environment splits the block on the stage's separator
(`,`), searches each query and answers with one `<information>` block that holds a JSON object, the queries and each
query's documents as one string of `Doc i: title   text` lines (`rag_r1/llm_agent/generation_mq.py`,
`_passages2string`, with a single newline on each side of the block). Everything else, the stops, the action read
from the first tagged block, the invalid-action message and the answer its EM reads, is Search-R1's: RAG-R1 trains
on Search-R1's loop and reward.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from searchrl.protocols import search_r1
from searchrl.protocols.search_r1 import (
    DOCUMENTS_CLOSE,
    DOCUMENTS_OPEN,
    INVALID_ACTION,
    SEARCH_CLOSE,
    STOP_OPENS,
    answered,
    from_r1_searcher,
    policy_answer,
    scored_answer,
)
from searchrl.protocols.segments import split_solution
from searchrl.search.base import Passage

NAME = "rag-r1"
# The stage's own prompt (configs/stages/rag_r1.yaml) states the rules, its limit and separator included.
PROMPT: str | None = None
PROMPT_END: str | None = None
# No native tool call: the search is written in the protocol's own tags.
TOOLS: list[dict] | None = None
# A search block may hold several queries: the environment splits it on episode.query_separator.
MULTI_QUERY = True
# Generation stops on the protocol's stops alone: nothing cuts a turn after the fact.
CUT_AFTER: str | None = None
EPISODE_DEFAULTS: dict = {}
# RAG-R1's loop (generation_mq.py with train_ppo_mq.sh's settings): Search-R1's, three queries a search.
EVAL_EPISODE: dict | None = {
    "top_k": 3, "max_turns": 4, "max_searches": 4, "max_segment_tokens": 500, "max_queries_per_block": 3,
    "query_separator": ",",
}  # fmt: skip
# The reward formulas (searchrl/reward/spec.py) that read this protocol's tags, and the four tags of Router-R1's walk
# (think, search, information, answer) in its spelling: an LLM router's searches (search.backend: router) can be
# written in it; None: they cannot.
REWARD_FORMULAS: tuple[str, ...] = ("search_r1_em", "search_r1_em_format")
ROUTER_TAGS: dict[str, tuple[str, str]] | None = None
# The tiny policy's warm start that speaks it (a folder of examples/, searchrl/rehearsal/warm_start.py); None: its
# rehearsals start from R1-Searcher's.
WARM_START: str | None = None
# Its reward is Search-R1's EM, which reads the answer alone: the project's formula has no parse of its solutions.
parse_solution = None

__all__ = [
    "split_solution",
    "DOCUMENTS_CLOSE",
    "DOCUMENTS_OPEN",
    "INVALID_ACTION",
    "SEARCH_CLOSE",
    "STOP_OPENS",
    "answered",
    "from_r1_searcher",
    "policy_answer",
    "scored_answer",
    "search_query",
    "stops",
]


def episode_problem(episode: Any) -> str | None:
    if episode.max_queries_per_block == 1:
        return (
            "episode.max_queries_per_block: RAG-R1's protocol sends several queries a search (its prompt: 3); set it, "
            "or speak search-r1 for one query a search"
        )
    return None


def stops(stop_after_answer: bool) -> list[str]:
    """`</search>` or `</answer>`, whichever comes first (Search-R1's own cut, `</answer>` only without a
    `</search>`, is not claimed for RAG-R1's loop)."""
    return [SEARCH_CLOSE, search_r1.ANSWER_CLOSE]


def search_query(segment: str) -> str | None:
    """The search block's content; None for an empty one, which ends as an invalid turn here."""
    return search_r1.search_query(segment) or None


def passage_entry(passage: Passage, bare_title: bool = False) -> str:
    """A passage as its KILT corpus line reads after the id: the title, three spaces, the text."""
    title_text = search_r1.titled(passage)
    return f"{title_text[0]}   {title_text[1]}" if title_text[0] else title_text[1]


def _block(body: str, after: str) -> str:
    # One newline on each side; a newline the action's last token already carries is not repeated.
    generated = len(after) - len(after.rstrip("\n"))
    return f"\n{DOCUMENTS_OPEN}\n{body}\n{DOCUMENTS_CLOSE}\n"[min(generated, 1) :]


def queries_block(queries: Sequence[str], documents: Sequence[Sequence[str]], empty: str, after: str = "") -> str:
    """The block after a search: `{"query": [...], "documents": [...]}` as `json.dumps(..., indent=2)` writes it,
    each query's `Doc i: ...` lines as one string (empty when nothing was found, as RAG-R1 leaves it)."""
    body = {"query": list(queries), "documents": ["\n".join(docs).strip() for docs in documents]}
    return _block(json.dumps(body, indent=2), after)


def documents_block(entries: Sequence[str], after: str = "") -> str:
    """Not reached: under this protocol every search is rendered by `queries_block` (a stage needs
    max_queries_per_block > 1)."""
    raise ValueError("RAG-R1's protocol renders a search's results with queries_block")


def message_block(message: str, after: str = "") -> str:
    """A failed search's message in the block, as plain text (RAG-R1 has no such block; ours never passes a failure
    off as documents)."""
    return _block(message.strip(), after)
