"""How the tiny policy writes an episode in each tag protocol it has a warm start for: the same episodes (a
search, the documents the environment appends, a reading, an answer; the same broken kinds), in the protocol's
own tags. The mixture and the probe take one of these; R1-Searcher's is what the shipped warm start was built on.

| kind | R1-Searcher's | Search-R1's |
|---|---|---|
| correct | searches, closes `</think>`, answers | `<think>`, `<search>`, documents, `<think>`, `<answer>` |
| no_search | answers without searching | `<think>` then `<answer>`: well formed, no search |
| think_left_open | answers without closing `</think>` | its second `<think>` never closed |
| two_answers | two answers | its reading outside `<think>` (a turn stops at the first `</answer>`) |
| no_answer | stops without an answer | its turn ends without an action (an invalid turn) |
| query_left_open | a query never closed | a `<search>` never closed |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from searchrl.protocols import r1_searcher as r1
from searchrl.protocols import search_r1 as sr1
from searchrl.search.base import Passage


class Writing(Protocol):
    PROTOCOL: str
    # Where the short copy task's prompt starts: the question's own line, the instruction text cut off.
    SHORT_FROM: str
    # What ends a generated segment that searched (the probe cuts its first segment there).
    SEARCH_CLOSE: str

    def search(self, opening: str, query: str) -> str: ...
    def query_left_open(self, opening: str, query: str, eos: str) -> str: ...
    def no_search(self, reading: str, answer: str, eos: str) -> str: ...
    def documents(self, passages: Sequence[str], after: str) -> str: ...
    def tail(self, kind: str, reading: str, answer: str, gold: str) -> str: ...
    def query(self, segment: str) -> str | None: ...
    def answer(self, text: str) -> str | None: ...


class R1Searcher:
    PROTOCOL = "r1-searcher"
    SHORT_FROM = "User:"
    SEARCH_CLOSE = r1.END_QUERY

    def search(self, opening: str, query: str) -> str:
        return f"{opening} {r1.BEGIN_QUERY} {query} {r1.END_QUERY}\n\n"

    def query_left_open(self, opening: str, query: str, eos: str) -> str:
        return f"{opening} {r1.BEGIN_QUERY} {query} {eos}"

    def no_search(self, reading: str, answer: str, eos: str) -> str:
        return f" I know this.{reading} {r1.THINK_CLOSE}\n{self._final(answer)}{eos}"

    def documents(self, passages: Sequence[str], after: str) -> str:
        return r1.format_documents(passages, after=after)

    def tail(self, kind: str, reading: str, answer: str, gold: str) -> str:
        final = self._final(answer)
        return {
            "correct": f"{reading} {r1.THINK_CLOSE}\n{final}",
            "think_left_open": f"{reading}\n{final}",
            "two_answers": f"{reading} {r1.THINK_CLOSE}\n{final}\n{r1.ANSWER_OPEN} {gold} {r1.ANSWER_CLOSE}",
            "no_answer": f"{reading} {r1.THINK_CLOSE}",
        }[kind]

    def query(self, segment: str) -> str | None:
        return r1.last_query(segment)

    def answer(self, text: str) -> str | None:
        return r1.extract_answer(text)

    @staticmethod
    def _final(answer: str) -> str:
        return f" {r1.ANSWER_OPEN} {answer} {r1.ANSWER_CLOSE}"


class SearchR1:
    PROTOCOL = "search-r1"
    SHORT_FROM = "Question:"
    SEARCH_CLOSE = sr1.SEARCH_CLOSE

    def search(self, opening: str, query: str) -> str:
        return f"{self._think(opening)}\n{sr1.SEARCH_OPEN} {query} {sr1.SEARCH_CLOSE}"

    def query_left_open(self, opening: str, query: str, eos: str) -> str:
        return f"{self._think(opening)}\n{sr1.SEARCH_OPEN} {query} {eos}"

    def no_search(self, reading: str, answer: str, eos: str) -> str:
        return f"{self._think(' I know this.' + reading)}\n{self._final(answer)}{eos}"

    def documents(self, passages: Sequence[str], after: str) -> str:
        entries = [sr1.passage_entry(Passage(id="", title="", text=p, score=0.0)) for p in passages]
        return sr1.documents_block(entries, after=after)

    def tail(self, kind: str, reading: str, answer: str, gold: str) -> str:
        final = self._final(answer)
        return {
            "correct": f"{self._think(reading)}\n{final}",
            "think_left_open": f"{sr1.THINK_OPEN}{reading}\n{final}",
            "two_answers": f"{reading.strip()}\n{final}",
            "no_answer": self._think(reading),
        }[kind]

    def query(self, segment: str) -> str | None:
        return sr1.search_query(segment)

    def answer(self, text: str) -> str | None:
        return sr1.policy_answer(text)

    @staticmethod
    def _think(text: str) -> str:
        return f"{sr1.THINK_OPEN}{text}{sr1.THINK_CLOSE}"

    @staticmethod
    def _final(answer: str) -> str:
        return f"{sr1.ANSWER_OPEN} {answer} {sr1.ANSWER_CLOSE}"


WRITINGS: dict[str, Writing] = {"r1-searcher": R1Searcher(), "search-r1": SearchR1()}
