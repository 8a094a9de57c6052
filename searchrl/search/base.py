"""The search interface every backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable


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


class BackendTraits:
    """What the code around a backend asks of its kind before opening one: the secrets its processes need, what it
    searches (so a resumed evaluation never mixes two), the servers a preflight probes and whether one free search
    may check it before a run. A backend class inherits these answers (an in-process index: no secret, no server)
    and overrides what differs, so no caller switches on a backend's name. `config` is the search config."""

    # One search costs nothing and shows whether the service behind the backend answers.
    probed_before_run: ClassVar[bool] = False
    # A search answered by a model the query names (the LLM router): the protocol must be able to name one.
    routes_to_models: ClassVar[bool] = False

    @classmethod
    def open(cls, config: Any) -> SearchBackend:
        """The backend a search config names; a kind whose options sit in a section of their own reads it."""
        return cls.from_config(config)  # type: ignore[attr-defined]

    @classmethod
    def secret_envs(cls, config: Any) -> list[str]:
        """Environment variables the backend's processes read credentials from."""
        return []

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        """What a search returns depends on: the backend, its index (as `index_identity` puts it) and options."""
        return {"backend": config.backend, "index": None, "options": {}}

    @classmethod
    def health_probes(cls, config: Any) -> list[HealthProbe]:
        """The servers behind the backend that answer `/health`, with a request that shows a token accepted."""
        return []

    @classmethod
    def check_shared(cls, config: Any) -> None:
        """Raise ValueError, naming the key and the fix, when the config cannot be opened in several processes at
        once (a training job opens the backend in every vLLM engine)."""


@dataclass(frozen=True, slots=True)
class HealthProbe:
    url: str
    token_env: str
    path: str
    payload: dict[str, Any]


def index_identity(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The parts of an index manifest that decide what a search returns."""
    if not manifest:
        return None
    corpus = manifest.get("corpus") or {}
    return {
        "model": manifest.get("model"),
        "factory": manifest.get("factory"),
        "passages": manifest.get("passages"),
        "corpus_sha256": corpus.get("sha256"),
    }


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
