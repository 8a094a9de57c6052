"""The tiny policy's warm-start mixture: protocol trajectories, most of them broken, for a brief
supervised pass, so that the policy follows the protocol sometimes, as a base model does before RL.

Every trajectory is the text an episode of the real environment would hold, in the protocol of a `Writing`
(searchrl/tiny_policy/writing.py): the prompt rendered with the stage's template, the policy's segments, and
the documents block the retrieval server returned for its query (exactly as the environment appends it). It is
written as OpenRLHF SFT messages: the policy's segments are `assistant` turns (trained on), the prompt and the
documents are not (the same mask as RL's action ranges). The kinds, with their share in `MIXTURE`
(R1-Searcher's tags here; each protocol's spelling of a kind, and what it is worth there, in writing.py):

| kind | what the policy does | stage-1 reward |
|---|---|---|
| correct | thinks, searches once, closes `</think>`, answers, EOS | 1.0 |
| no_search | answers without searching | 0.5 |
| think_left_open | searches, then answers without closing `</think>` | 0.5 |
| two_answers | searches, then gives two answers | 0.5 |
| no_answer | searches, closes `</think>`, stops without an answer | 0.5 |
| query_left_open | opens a query and never closes it | 0.0 |

One trajectory per real stage-1 question (all but the last 100, kept for evaluation), answered with its
gold; three per fictional person of the training split (answers only in the documents), answered with the
birthplace the documents name with probability `copy_rate` (0.5), another city otherwise.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from searchrl.metrics import as_golds
from searchrl.paths import EXAMPLES
from searchrl.tiny_policy.writing import WRITINGS, Writing

MIXTURE: dict[str, float] = {
    "correct": 0.25,
    "no_search": 0.15,
    "think_left_open": 0.15,
    "two_answers": 0.15,
    "no_answer": 0.15,
    "query_left_open": 0.15,
}
STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is was were are be been who what which when where why how "
    "did does do whose whom that this these those it its as".split()
)
# Short, regular sentences: a policy of a few hundred thousand parameters learns the protocol's shape from
# them in a brief pass, and its samples vary in what a base model varies in (the words, the tags kept or not).
OPENINGS = (" I need to search.", " Let me search.", " I should look it up.")
READINGS = (" I found it.", " The documents say {a}.", " So the answer is {a}.")


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    query: str  # what the policy searches for
    choices: tuple[str, ...] = ()  # fictional questions: the cities a wrong answer is drawn from


def keywords(question: str, limit: int = 4) -> str:
    """A keyword query made from a question, as R1-Searcher's policy writes them."""
    words = [w.strip("?,.!\"'") for w in question.split()]
    kept = [w for w in words if w and w.lower() not in STOPWORDS]
    return " ".join(kept[:limit]) or question


def trajectory(
    kind: str,
    prompt: str,
    q: Question,
    documents: Sequence[str],
    rng: random.Random,
    eos: str,
    copy_rate: float,
    writing: Writing = WRITINGS["r1-searcher"],
) -> list[dict[str, str]]:
    """One episode as SFT messages, in `writing`'s protocol; the last assistant turn ends with `eos` when the
    policy stops there."""
    answer = q.answer
    if q.choices and rng.random() >= copy_rate:
        answer = rng.choice([c for c in q.choices if c != q.answer])
    query = q.query
    open_ = rng.choice(OPENINGS).format(q=query)
    search = writing.search(open_, query)
    read = rng.choice(READINGS).format(a=answer)
    user = {"role": "user", "content": prompt}
    if kind == "no_search":
        return [user, {"role": "assistant", "content": writing.no_search(read, answer, eos)}]
    if kind == "query_left_open":
        return [user, {"role": "assistant", "content": writing.query_left_open(open_, query, eos)}]
    docs = {"role": "tool", "content": writing.documents(documents, after=search)}
    tail = writing.tail(kind, read, answer, q.answer)
    return [user, {"role": "assistant", "content": search}, docs, {"role": "assistant", "content": tail + eos}]


def build(
    questions: Sequence[Question],
    render: Callable[[str], str],
    retrieve: Callable[[list[str]], list[list[str]]],
    eos: str,
    seed: int = 0,
    copies: int = 1,
    copy_rate: float = 0.35,
    mixture: dict[str, float] | None = None,
    writing: Writing = WRITINGS["r1-searcher"],
) -> list[dict[str, Any]]:
    """`copies` trajectories per question, each of a kind drawn from `mixture`; `render` makes the prompt
    from a question, `retrieve` gives the documents' texts for each query."""
    mixture = mixture or MIXTURE
    rng = random.Random(seed)
    found = dict(zip([q.query for q in questions], retrieve([q.query for q in questions]), strict=True))
    kinds, weights = list(mixture), list(mixture.values())
    rows = []
    for q in questions:
        for _ in range(copies):
            kind = rng.choices(kinds, weights)[0]
            messages = trajectory(kind, render(q.question), q, found[q.query], rng, eos, copy_rate, writing)
            rows.append({"messages": messages, "kind": kind, "question": q.question, "label": q.answer})
    return rows


HELDOUT_STAGE1 = 100  # the last stage-1 questions: for evaluation only, never in the warm start or training


def real_questions() -> list[Question]:
    rows = [json.loads(line) for line in (EXAMPLES / "stage_1.jsonl").open(encoding="utf-8")][:-HELDOUT_STAGE1]
    return [Question(r["question"], as_golds(r["answer"])[0], keywords(r["question"])) for r in rows]


def fictional_questions(split: str = "train") -> list[Question]:
    rows = [json.loads(line) for line in (EXAMPLES / "fictional" / f"{split}.jsonl").open(encoding="utf-8")]
    cities = tuple(sorted({r["answer"] for r in rows}))
    return [Question(r["question"], r["answer"], r["person"], cities) for r in rows]
