"""R1-Searcher's tag protocol: the tags, the documents block, and a parser for solution texts.

One implementation shared by the rewards, the agent and the evaluation, so a format rule never
means one thing at training time and another at evaluation time. The names in capitals and the functions
under "The protocol's interface" are what `searchrl.protocols.TagProtocol` asks of every protocol.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from searchrl.protocols.segments import clean_query as clean_query
from searchrl.protocols.segments import policy_segments
from searchrl.protocols.segments import split_queries as split_queries
from searchrl.protocols.segments import split_solution as split_solution
from searchrl.search.base import Passage, r1_text

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BEGIN_QUERY = "<|begin_of_query|>"
END_QUERY = "<|end_of_query|>"
BEGIN_DOCS = "<|begin_of_documents|>"
END_DOCS = "<|end_of_documents|>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

NAME = "r1-searcher"
# Its prompts are the model configs' own templates (configs/models/*.yaml), so none is set here.
PROMPT: str | None = None
# Every prompt opens the policy's reasoning; the model configs' templates end with it.
PROMPT_END = THINK_OPEN
# No native tool call: the search is written in the protocol's own tags.
TOOLS: list[dict] | None = None
# A query block may hold several queries (RAG-R1's mode, on this protocol's tags) where the stage allows them.
MULTI_QUERY = True
# Generation stops on the protocol's stops alone: nothing cuts a turn after the fact.
CUT_AFTER: str | None = None
EPISODE_DEFAULTS: dict = {}
# Its evaluation: top-5 passages, up to 16 searches (training uses 3 and 8).
EVAL_EPISODE: dict | None = {"top_k": 5, "max_searches": 16, "max_segment_tokens": 512}
# The reward formulas (searchrl/reward/spec.py) that read this protocol's tags, and the four tags of Router-R1's walk
# (think, search, information, answer) in its spelling: an LLM router's searches (search.backend: router) can be
# written in it; None: they cannot.
REWARD_FORMULAS: tuple[str, ...] = ("searchrl", "router_r1")
ROUTER_TAGS: dict[str, tuple[str, str]] | None = {
    "think": (THINK_OPEN, THINK_CLOSE),
    "search": (BEGIN_QUERY, END_QUERY),
    "information": (BEGIN_DOCS, END_DOCS),
    "answer": (ANSWER_OPEN, ANSWER_CLOSE),
}
# The tiny policy's warm start that speaks it (a folder of examples/, searchrl/rehearsal/warm_start.py); None: its
# rehearsals start from R1-Searcher's.
WARM_START: str | None = "tiny_policy"
# A segment that is not a search ends the episode: its reward reads what was written.
INVALID_ACTION: str | None = None
SEARCH_CLOSE = END_QUERY
# Each stop string, and the tag that opens what it closes (an endpoint that drops the stop string is read by it).
STOP_OPENS = {END_QUERY: BEGIN_QUERY, ANSWER_CLOSE: ANSWER_OPEN}
DOCUMENTS_OPEN = BEGIN_DOCS
DOCUMENTS_CLOSE = END_DOCS

# The seven forms whose counts must agree for the query/documents blocks to be well formed.
# The exact-whitespace forms catch blocks the model typed itself instead of receiving them.
TAG_FORMS: dict[str, str] = {
    "begin_of_documents_nl": BEGIN_DOCS + "\n",
    "end_of_documents_nlnl": END_DOCS + "\n\n",
    "begin_of_query": BEGIN_QUERY,
    "end_of_query": END_QUERY,
    "begin_of_documents": BEGIN_DOCS,
    "end_of_documents": END_DOCS,
    "begin_of_documents_first": BEGIN_DOCS + "\n(1)",
}

# Every tag, with the exact-whitespace forms of the documents tags matched as longer variants, so
# one C-level findall and a Counter give every count (no Python work per tag; rollouts are 8 KB+).
_TAG_FORMS = re.compile(
    "|".join(
        re.escape(tag)
        for tag in (
            TAG_FORMS["begin_of_documents_first"],
            TAG_FORMS["begin_of_documents_nl"],
            BEGIN_DOCS,
            TAG_FORMS["end_of_documents_nlnl"],
            END_DOCS,
            BEGIN_QUERY,
            END_QUERY,
            THINK_OPEN,
            THINK_CLOSE,
            ANSWER_OPEN,
            ANSWER_CLOSE,
        )
    )
)


@dataclass(frozen=True)
class ParsedSolution:
    """The parts of a solution text (everything the policy produced after the prompt's `<think>`).

    The queries, document blocks and the text outside them are worked out on first use: scoring a
    sample needs only the tag counts and the answer, and the reward server scores thousands a second.
    """

    text: str
    tag_counts: dict[str, int]
    think_opens: int
    think_closes: int
    answer_opens: int
    answer_closes: int
    answer: str | None

    # No native tool calls in this protocol: none can be malformed.
    call_problems: ClassVar[tuple[str, ...]] = ()
    # Tags whose presence inside the answer means the model stuffed the protocol into it.
    ANSWER_FORBIDDEN = ("begin_of_query", "end_of_query", "begin_of_documents", "end_of_documents", THINK_OPEN,
                        THINK_CLOSE)  # fmt: skip

    @property
    def searched(self) -> bool:
        return self.tag_counts["begin_of_query"] >= 1

    @property
    def blocks_balanced(self) -> bool:
        """The seven query/documents tag forms appear equally often."""
        return len(set(self.tag_counts.values())) == 1

    @property
    def structure_ok(self) -> bool:
        """The prompt opened `<think>`: the policy closes it once and opens none."""
        return self.think_opens == 0 and self.think_closes == 1

    @cached_property
    def queries(self) -> list[str]:
        if not self.tag_counts["begin_of_query"]:
            return []
        text, found, pos = self.text, [], 0
        while (start := text.find(BEGIN_QUERY, pos)) >= 0:
            end = text.find(END_QUERY, start + len(BEGIN_QUERY))
            if end < 0:
                break
            found.append(clean_query(text[start + len(BEGIN_QUERY) : end]))
            pos = end + len(END_QUERY)
        return found

    @cached_property
    def _spans(self) -> list[tuple[int, int]]:
        return _document_spans(self.text) if self.tag_counts["begin_of_documents"] else []

    @cached_property
    def documents(self) -> list[str]:
        return [self.text[start + len(BEGIN_DOCS) : end - len(END_DOCS)] for start, end in self._spans]

    @cached_property
    def outside_documents(self) -> str:
        if not self._spans:
            return self.text
        starts = [0] + [end for _, end in self._spans]
        ends = [start for start, _ in self._spans] + [len(self.text)]
        return "".join(self.text[a:b] for a, b in zip(starts, ends, strict=True))

    @property
    def num_searches(self) -> int:
        return len(self.queries)

    @property
    def num_document_blocks(self) -> int:
        return self.tag_counts["begin_of_documents"]


def extract_answer(text: str) -> str | None:
    """R1-Searcher's answer extraction: the text of the last `<answer>`, up to its `</answer>`.

    None when either tag is missing, which every reward treats as "no answer".
    """
    if ANSWER_OPEN not in text or ANSWER_CLOSE not in text:
        return None
    return _last_answer(text)


def _last_answer(text: str) -> str:
    rest = text[text.rfind(ANSWER_OPEN) + len(ANSWER_OPEN) :]
    end = rest.find(ANSWER_CLOSE)
    return (rest if end < 0 else rest[:end]).strip()


def parse_solution(text: str) -> ParsedSolution:
    """Split a solution text into queries issued, document blocks, think close and answer."""
    found = Counter(_TAG_FORMS.findall(text)).get
    docs_first = found(TAG_FORMS["begin_of_documents_first"], 0)
    docs_nl = docs_first + found(TAG_FORMS["begin_of_documents_nl"], 0)
    end_nlnl = found(TAG_FORMS["end_of_documents_nlnl"], 0)
    answer_opens, answer_closes = found(ANSWER_OPEN, 0), found(ANSWER_CLOSE, 0)
    return ParsedSolution(
        text=text,
        tag_counts={
            "begin_of_documents_nl": docs_nl,
            "end_of_documents_nlnl": end_nlnl,
            "begin_of_query": found(BEGIN_QUERY, 0),
            "end_of_query": found(END_QUERY, 0),
            "begin_of_documents": docs_nl + found(BEGIN_DOCS, 0),
            "end_of_documents": end_nlnl + found(END_DOCS, 0),
            "begin_of_documents_first": docs_first,
        },
        think_opens=found(THINK_OPEN, 0),
        think_closes=found(THINK_CLOSE, 0),
        answer_opens=answer_opens,
        answer_closes=answer_closes,
        answer=_last_answer(text) if answer_opens and answer_closes else None,
    )


def _document_spans(text: str) -> list[tuple[int, int]]:
    """Where each document block starts and ends, tags included (non-greedy: begin to the next end).

    Plain `str.find` instead of a DOTALL regex: rollouts carry kilobytes of documents, and this runs
    for every scored sample on the reward server's hot path.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    while (start := text.find(BEGIN_DOCS, pos)) >= 0:
        end = text.find(END_DOCS, start + len(BEGIN_DOCS))
        if end < 0:
            break
        pos = end + len(END_DOCS)
        spans.append((start, pos))
    return spans


def last_query(action_text: str) -> str | None:
    """The query of a generation segment that stopped on `<|end_of_query|>`, or None."""
    if not action_text.rstrip().endswith(END_QUERY) or BEGIN_QUERY not in action_text:
        return None
    raw = action_text.rsplit(BEGIN_QUERY, 1)[1].rsplit(END_QUERY, 1)[0]
    query = clean_query(raw)
    return query or None


def format_documents(passages: Sequence[str], after: str = "") -> str:
    """The environment feedback appended after a query: numbered passages inside the documents tags.

    `after` is the action the block follows: the newlines it already ends with (a token that merged
    `|>` with newlines) are not repeated, so the policy's context and the scored text stay equal.
    """
    body = "".join(f"({i}){p}\n" for i, p in enumerate(passages, start=1))
    block = f"\n\n{BEGIN_DOCS}\n{body}{END_DOCS}\n\n"
    generated = len(after) - len(after.rstrip("\n"))
    return block[min(generated, 2) :]


# The protocol's interface (searchrl.protocols.TagProtocol): what the agent, the environment and the replay
# engines ask of the run's protocol.


def stops(stop_after_answer: bool) -> list[str]:
    """Where a segment's generation stops: a query to run, and `</answer>` where the stage cuts there."""
    return [END_QUERY, ANSWER_CLOSE] if stop_after_answer else [END_QUERY]


def search_query(segment: str) -> str | None:
    return last_query(segment)


def answered(segment: str) -> bool:
    return extract_answer(segment) is not None


def policy_answer(solution: str) -> str | None:
    return extract_answer(solution)


def scored_answer(prompt: str, solution: str) -> str | None:
    """The answer its metric reads: the policy's own, from the solution alone."""
    return extract_answer(solution)


def passage_entry(passage: Passage, bare_title: bool = False) -> str:
    return r1_text(passage)


def documents_block(entries: Sequence[str], after: str = "") -> str:
    return format_documents(entries, after)


def message_block(message: str, after: str = "") -> str:
    """A block that holds a message instead of passages (a failed search, nothing found)."""
    return format_documents([message], after)


def queries_block(queries: Sequence[str], documents: Sequence[Sequence[str]], empty: str, after: str = "") -> str:
    """The block after a search of several queries: an entry a query, `Query: q` and then its own documents (or
    `empty` when it found none)."""
    entries = [f"Query: {q}\n" + ("\n".join(docs) or empty) for q, docs in zip(queries, documents, strict=True)]
    return format_documents(entries, after)


def from_r1_searcher(trajectory: str) -> str:
    """A recorded R1-Searcher trajectory in this protocol: itself."""
    return trajectory


def episode_problem(episode: Any) -> str | None:
    """Why an episode's settings do not fit this protocol (beyond what every protocol checks); None when they do."""
    if episode.max_turns is not None:
        return "episode.max_turns: Search-R1's turn limit; R1-Searcher's episodes use max_searches"
    return None


def recorded_turns(trajectory: str) -> list[tuple[str, str | None, str | None]]:
    """A recorded trajectory's segments as (reasoning, query, answer): the reasoning's text with the think tags
    dropped and white space collapsed, what the other protocols' translations of a recording write again."""
    turns = []
    for segment in policy_segments(trajectory, SEARCH_CLOSE, DOCUMENTS_OPEN, DOCUMENTS_CLOSE):
        query, answer = last_query(segment), extract_answer(segment)
        reasoning = segment.split(BEGIN_QUERY if query else ANSWER_OPEN)[0]
        for tag in (THINK_OPEN, THINK_CLOSE):
            reasoning = reasoning.replace(tag, " ")
        turns.append((" ".join(reasoning.split()), query, answer))
    return turns
