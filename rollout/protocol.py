"""R1-Searcher's tag protocol: the tags, the documents block, and a parser for solution texts.

One implementation shared by the rewards, the agent and the evaluation, so a format rule never
means one thing at training time and another at evaluation time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BEGIN_QUERY = "<|begin_of_query|>"
END_QUERY = "<|end_of_query|>"
BEGIN_DOCS = "<|begin_of_documents|>"
END_DOCS = "<|end_of_documents|>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

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

_QUERY_BLOCK = re.compile(re.escape(BEGIN_QUERY) + r"(.*?)" + re.escape(END_QUERY), re.DOTALL)
_ANY_TAG = re.compile(r"<\|(?:begin|end)_of_(?:query|documents)\|>|</?think>|</?answer>")


@dataclass(frozen=True)
class ParsedSolution:
    """The parts of a solution text (everything the policy produced after the prompt's `<think>`)."""

    text: str
    queries: list[str]
    documents: list[str]
    tag_counts: dict[str, int]
    think_opens: int
    think_closes: int
    answer_opens: int
    answer_closes: int
    answer: str | None
    outside_documents: str = field(repr=False)

    @property
    def num_searches(self) -> int:
        return len(self.queries)

    @property
    def num_document_blocks(self) -> int:
        return self.tag_counts["begin_of_documents"]


def clean_query(raw: str) -> str:
    """A search query as the environment sends it: quotes stripped, white space collapsed."""
    return " ".join(raw.replace('"', " ").replace("\u201c", " ").replace("\u201d", " ").split())


def extract_answer(text: str) -> str | None:
    """R1-Searcher's answer extraction: the text of the last `<answer>`, up to its `</answer>`.

    None when either tag is missing, which every reward treats as "no answer".
    """
    if ANSWER_OPEN not in text or ANSWER_CLOSE not in text:
        return None
    return text.split(ANSWER_OPEN)[-1].split(ANSWER_CLOSE)[0].strip()


def parse_solution(text: str) -> ParsedSolution:
    """Split a solution text into queries issued, document blocks, think close and answer."""
    documents, outside = _split_documents(text)
    tags = _count_tags(text)
    return ParsedSolution(
        text=text,
        queries=[clean_query(q) for q in _QUERY_BLOCK.findall(text)] if tags[BEGIN_QUERY] else [],
        documents=documents,
        tag_counts={
            "begin_of_documents_nl": tags["docs_nl"],
            "end_of_documents_nlnl": tags["end_nlnl"],
            "begin_of_query": tags[BEGIN_QUERY],
            "end_of_query": tags[END_QUERY],
            "begin_of_documents": tags[BEGIN_DOCS],
            "end_of_documents": tags[END_DOCS],
            "begin_of_documents_first": tags["docs_first"],
        },
        think_opens=tags[THINK_OPEN],
        think_closes=tags[THINK_CLOSE],
        answer_opens=tags[ANSWER_OPEN],
        answer_closes=tags[ANSWER_CLOSE],
        answer=extract_answer(text),
        outside_documents=outside,
    )


def _count_tags(text: str) -> Counter[str]:
    """Every tag and exact-whitespace form of TAG_FORMS in one scan of the text.

    Eleven `str.count` passes over a multi-kilobyte rollout were the largest cost of scoring a
    sample on the reward server; the tags themselves are few, so one regex pass is enough.
    """
    counts: Counter[str] = Counter()
    for m in _ANY_TAG.finditer(text):
        tag = m.group()
        counts[tag] += 1
        if tag == BEGIN_DOCS and text.startswith("\n", m.end()):
            counts["docs_nl"] += 1
            counts["docs_first"] += text.startswith("(1)", m.end() + 1)
        elif tag == END_DOCS and text.startswith("\n\n", m.end()):
            counts["end_nlnl"] += 1
    return counts


def _split_documents(text: str) -> tuple[list[str], str]:
    """Document blocks (non-greedy, begin to the next end) and the text outside them.

    Plain `str.find` instead of a DOTALL regex: rollouts carry kilobytes of documents, and this runs
    for every scored sample on the reward server's hot path.
    """
    documents: list[str] = []
    outside: list[str] = []
    pos = 0
    while (start := text.find(BEGIN_DOCS, pos)) >= 0:
        end = text.find(END_DOCS, start + len(BEGIN_DOCS))
        if end < 0:
            break
        outside.append(text[pos:start])
        documents.append(text[start + len(BEGIN_DOCS) : end])
        pos = end + len(END_DOCS)
    outside.append(text[pos:])
    return documents, "".join(outside)


def split_queries(query: str, separator: str, limit: int) -> list[str]:
    """The queries of one block in multi-query mode: split on the separator, cleaned, empties dropped,
    at most `limit` (the rest are ignored, which keeps one block from fanning out without bound)."""
    if limit <= 1:
        return [query]
    parts = [clean_query(q) for q in query.split(separator)]
    return [q for q in parts if q][:limit] or [query]


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


def split_solution(query: str, prompt: str) -> str:
    """The solution inside OpenRLHF's decoded `query` (prompt + response) given the `prompt`.

    Decoding the token ids does not always give back the prompt string byte for byte (special tokens
    in front, whitespace clean-up), so after the exact forms the prompt is matched ignoring white space.
    Raises ValueError when the prompt cannot be found, so a mismatch is never scored silently.
    """
    if query.startswith(prompt):
        return query[len(prompt) :]
    at = query.find(prompt)
    if at >= 0:
        return query[at + len(prompt) :]
    end = _match_ignoring_space(query, prompt)
    if end is None:
        raise ValueError("the prompt is not contained in the query")
    return query[end:]


def _match_ignoring_space(query: str, prompt: str) -> int | None:
    needle = "".join(prompt.split())
    if not needle:
        return 0
    positions = [i for i, ch in enumerate(query) if not ch.isspace()]
    squeezed = "".join(query[i] for i in positions)
    at = squeezed.find(needle)
    if at < 0:
        return None
    return positions[at + len(needle) - 1] + 1
