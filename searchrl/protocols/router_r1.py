"""Router-R1's tag protocol (ulab-uiuc/Router-R1): Search-R1's tags, each search naming a model of the pool.

The policy writes `<search> Model-Name: query </search>`; the router puts the query to that model and the environment
appends its reply as `\n\n<information>reply</information>\n\n` (`router_r1/llm_agent/generation.py`): the reply
alone, no `Doc i` and no title. A search that is no routed query (the prompt's placeholder, no colon, nothing after
the last colon) is an invalid action, to which the original appends nothing: the turn counts and the policy writes on.
Its reward reads the response alone, the last `<answer>` of it (searchrl/reward/router_r1.py, with these tags).
"""

from __future__ import annotations

from collections.abc import Sequence

from searchrl.protocols import search_r1
from searchrl.protocols.search_r1 import (
    ANSWER,
    DOCUMENTS_CLOSE,
    DOCUMENTS_OPEN,
    INFORMATION,
    SEARCH,
    SEARCH_CLOSE,
    STOP_OPENS,
    THINK,
    answered,
    episode_problem,
    from_r1_searcher,
    message_block,
    policy_answer,
)
from searchrl.protocols.segments import split_solution
from searchrl.search.base import Passage

NAME = "router-r1"
# The stage's own prompt (configs/stages/router_r1.yaml) lists the pool; the policy opens its own `<think>`.
PROMPT: str | None = None
PROMPT_END: str | None = None
# No native tool call: the search is written in the protocol's own tags.
TOOLS: list[dict] | None = None
# An invalid action gets nothing appended (generation.py's next_obs ''): not None, since the episode goes on.
INVALID_ACTION: str | None = ""
MULTI_QUERY = False
# Generation stops on the protocol's stops alone: nothing cuts a turn after the fact.
CUT_AFTER: str | None = None
EPISODE_DEFAULTS: dict = {}
# Evaluated by `searchrl eval routing` with its stage config, not `eval local`.
EVAL_EPISODE: dict | None = None
# The reward formulas (searchrl/reward/spec.py) that read this protocol's tags, and the four tags of Router-R1's walk
# (think, search, information, answer) in its spelling: an LLM router's searches (search.backend: router) can be
# written in it; None: they cannot.
REWARD_FORMULAS: tuple[str, ...] = ("router_r1",)
# The tiny policy's warm start that speaks it (a folder of examples/, searchrl/rehearsal/warm_start.py); None: its
# rehearsals start from R1-Searcher's.
WARM_START: str | None = None
# Its reward (formula router_r1) reads the answer and the routed costs: the project's formula has no parse of it.
parse_solution = None
# The four blocks its reward walks, by the original's names.
TAGS = {name: (f"<{name}>", f"</{name}>") for name in (THINK, SEARCH, INFORMATION, ANSWER)}
ROUTER_TAGS: dict[str, tuple[str, str]] | None = TAGS
# What its postprocess_predictions refuses to route: the prompt's placeholder, in any case.
PLACEHOLDERS = ("llm-name", "your-query")

__all__ = [
    "episode_problem",
    "split_solution",
    "DOCUMENTS_CLOSE",
    "DOCUMENTS_OPEN",
    "SEARCH_CLOSE",
    "STOP_OPENS",
    "answered",
    "from_r1_searcher",
    "message_block",
    "policy_answer",
    "stops",
]


def stops(stop_after_answer: bool) -> list[str]:
    """`</search>` or `</answer>`, whichever comes first, as Router-R1 cuts its responses."""
    return [SEARCH_CLOSE, search_r1.ANSWER_CLOSE]


def search_query(segment: str) -> str | None:
    """The routed query (`Model-Name: query`) when the segment's first tagged action is a search that names one;
    None for a search the original does not route (placeholder, no colon, an empty query) or another action."""
    kind, content = search_r1.action(segment)
    if kind != SEARCH or ":" not in content or not content.rsplit(":", 1)[1].strip():
        return None
    return None if any(p in content.lower() for p in PLACEHOLDERS) else content


def scored_answer(prompt: str, solution: str) -> str | None:
    """Its reward and evaluation read the response alone: the policy's last answer."""
    return policy_answer(solution)


def passage_entry(passage: Passage, bare_title: bool = False) -> str:
    """A routed model's reply, as it is."""
    return passage.text.strip()


def documents_block(entries: Sequence[str], after: str = "") -> str:
    """The reply in the block, stripped, with the blank lines generation.py puts around it."""
    return message_block("\n".join(entries), after)


def queries_block(queries: Sequence[str], documents: Sequence[Sequence[str]], empty: str, after: str = "") -> str:
    """Not reached: a search names one model and one query (max_queries_per_block 1)."""
    raise ValueError("Router-R1's protocol sends one query a search")
