"""The search interface every backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Passage:
    id: str
    title: str
    text: str
    score: float
    # What answering cost (e.g. an LLM's tokens times its price); not part of the HTTP contract.
    cost: float = 0.0

    def to_dict(self) -> dict[str, str | float]:
        return {"id": self.id, "title": self.title, "text": self.text, "score": self.score}


class SearchError(RuntimeError):
    """A search could not be answered (server unreachable after every retry, or it refused the request)."""

    # An outage lets an episode go on with a "search failed" documents block; a failure that says the run
    # itself is wrong (a replay that was never recorded) must stop it instead.
    ends_run: ClassVar[bool] = False


class SearchRefusedError(SearchError):
    """The server refused this request as sent (HTTP 4xx other than 401/403: a query over its length limit,
    too many queries at once). Another request may pass: a batch's caller can ask again in smaller parts,
    so one bad query fails only its own episode."""


class SearchAuthError(SearchError):
    """The search service refused the credentials (HTTP 401/403): every later search would fail too, so
    the run stops at once instead of training on "search failed" documents."""

    ends_run = True


class SearchBudgetError(SearchError):
    """The search service's budget is spent (HTTP 402: search.web.max_queries or max_usd reached): every later
    search would be refused too, so the run stops, naming the limit, instead of training on failed searches."""

    ends_run = True


@runtime_checkable
class SearchBackend(Protocol):
    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        """Best-first passages for each query, one list per query in input order."""
        ...

    async def aclose(self) -> None: ...


def normalise_query(query: str) -> str:
    # Whitespace runs never change a WordPiece/SentencePiece tokenisation, so collapsing them is a safe cache key.
    return " ".join(query.split())


def r1_text(passage: Passage) -> str:
    """A passage as R1-Searcher's trained models saw it in their documents: `Title: <title> Text: <text>`,
    or the text alone when there is no title (corpora like kiltmini carry that prefix in the text)."""
    return f"Title: {passage.title} Text: {passage.text}" if passage.title else passage.text


def unquoted(first_line: str) -> str:
    """wiki-18's first line without the one pair of quotes it writes around a title, and nothing else taken away:
    Search-R1's protocol puts them back when it renders the passage (searchrl/protocols/search_r1.py), so a passage
    imported and rendered gives Search-R1's string byte for byte (quotes inside a title and spaces kept)."""
    return first_line[1:-1] if len(first_line) >= 2 and first_line[0] == first_line[-1] == '"' else first_line
