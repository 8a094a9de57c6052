"""One kept episode: what the policy was asked, what it wrote and was shown, and how the reward judged it.

A record carries the solution as the policy's context held it (documents blocks included) and the protocol that
wrote it; its turns are cut from that text by the protocol's own documents tags, so one reader serves every
protocol and no record repeats the text in a second shape.
"""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, Field

from searchrl.metrics import LabelError, as_golds
from searchrl.protocols import TagProtocol, get_protocol

# Where a record was written: a training job's agent, a rehearsal's rollout, or an evaluation.
Source = Literal["train", "rehearsal", "eval"]
VIOLATION_PREFIX = "violation_"


class Turn(BaseModel):
    """A stretch of the policy's text and, when it searched, the query it sent and the block that came back."""

    text: str
    query: str | None = None
    documents: str | None = None


class EpisodeRecord(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    # The trainer's step; None when the writer could not know it (the reader assigns it from the run's step times).
    step: int | None = None
    time: float
    source: Source
    protocol: str
    prompt: str
    solution: str
    answer: str | None = None
    gold: list[str] = Field(default_factory=list)
    reward: float
    score: float | None = None
    # The reward's components and the environment's figures, as OpenRLHF's extra_logs carry them.
    components: dict[str, float] = Field(default_factory=dict)
    queries: list[str] = Field(default_factory=list)
    prompt_tokens: int | None = None
    response_tokens: int | None = None
    seconds: float | None = None
    search_seconds: float | None = None
    # Where in `solution` each block the environment appended lies (character offsets), when the writer knew: a
    # block cut to episode.max_observation_tokens has lost its closing tag, and the tags alone would then run it
    # on over the turns after it (Search-R1 cuts its observations at 500 tokens).
    observations: list[tuple[int, int]] | None = None

    @property
    def violations(self) -> list[str]:
        """The format rules the solution broke, by name."""
        return sorted(
            k[len(VIOLATION_PREFIX) :] for k, v in self.components.items() if k.startswith(VIOLATION_PREFIX) and v > 0
        )

    def turns(self) -> list[Turn]:
        return split_turns(self.solution, self.protocol, self.observations)


def split_turns(solution: str, protocol_name: str, observations: list[tuple[int, int]] | None = None) -> list[Turn]:
    """The solution cut at each documents block of its protocol: each turn the text before a block, the query that
    text asked (the protocol's own reading) and the block itself; the last turn the text after the last block.
    `observations`: the blocks' offsets as the writer recorded them, used instead of the tags when given."""
    protocol = get_protocol(protocol_name)
    if observations:
        return split_at(solution, observations, protocol)
    opening, closing = protocol.DOCUMENTS_OPEN, protocol.DOCUMENTS_CLOSE
    turns: list[Turn] = []
    rest = solution
    while (start := rest.find(opening)) >= 0:
        end = rest.find(closing, start)
        end = len(rest) if end < 0 else end + len(closing)
        text = rest[:start]
        turns.append(Turn(text=text, query=protocol.search_query(text), documents=rest[start:end]))
        rest = rest[end:]
    if rest or not turns:
        turns.append(Turn(text=rest))
    return turns


def split_at(solution: str, observations: list[tuple[int, int]], protocol: TagProtocol) -> list[Turn]:
    """The turns between the recorded blocks; the whitespace before a block's opening tag stays with the text before
    it, as the tags would cut it."""
    turns: list[Turn] = []
    at = 0
    for start, end in sorted(observations):
        opening = solution.find(protocol.DOCUMENTS_OPEN, start, end)
        start = opening if opening >= 0 else start
        text = solution[at:start]
        turns.append(Turn(text=text, query=protocol.search_query(text), documents=solution[start:end]))
        at = end
    rest = solution[at:]
    if rest or not turns:
        turns.append(Turn(text=rest))
    return turns


def label_golds(label: object) -> list[str]:
    """The gold answers a label holds; none for a label that holds none (the reward refused it already)."""
    try:
        return as_golds(label)
    except LabelError:
        return []


def token_count(tokenizer: object, text: str) -> int | None:
    """The text's length in the policy's tokens; None without a tokenizer at hand."""
    if tokenizer is None:
        return None
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])  # type: ignore[operator]
