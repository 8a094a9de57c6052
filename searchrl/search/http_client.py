"""Async client backend for one or several retrieval servers, with round robin, timeouts and retries."""

from __future__ import annotations

import itertools
import os
from typing import Any

from searchrl.http_transport import (
    HttpRefusedError,
    HttpSession,
    RequestEncodingError,
    RetryableError,
    RetryPolicy,
)
from searchrl.search.base import (
    BackendTraits,
    HealthProbe,
    Passage,
    SearchAuthError,
    SearchBudgetError,
    SearchError,
    SearchRefusedError,
    index_identity,
)
from searchrl.search.settings import DEFAULT_DEADLINE_S, SearchConfig


def _results(body: Any) -> list:
    results = body["results"]
    if not isinstance(results, list):
        raise TypeError("results is not a list")
    return results


def served_manifest(urls: list[str], token: str | None = None) -> dict[str, Any] | None:
    """The index manifest a retrieval server reports; a server with a token shows it only to a bearer of it."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for url in urls:
        try:
            return httpx.get(url.rstrip("/") + "/health", headers=headers, timeout=5.0).json().get("manifest")
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
    return None


class HttpSearchBackend(BackendTraits):
    """At most `max_connections` searches in flight; the others wait their turn without their `timeout_s`
    running. 401/403 raise SearchAuthError and other 4xx SearchRefusedError at once; 5xx, 429 and connection
    trouble are retried with jittered backoff (Retry-After honoured), each try on the next server, until
    `deadline_s` after the call began (waits included), or after `retries` extra tries when that is set.

    A deadline rather than a count of tries: a restarted retrieval server is down for the encoder's load
    (10-13 s measured with MiniLM on 2 cores; longer for a large model), far past what a few quick tries cover.
    """

    def __init__(
        self,
        urls: str | list[str],
        timeout_s: float = 30.0,
        retries: int | None = None,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        token: str | None = None,
        max_connections: int = 256,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        self.urls = [u.strip().rstrip("/") for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not self.urls:
            raise ValueError("urls: at least one retrieval server URL is required")
        self.retries = retries
        self.deadline_s = deadline_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._next = itertools.cycle(self.urls)
        self._retry = RetryPolicy(
            retries=retries, deadline_s=deadline_s, backoff_s=backoff_s, backoff_max_s=backoff_max_s
        )
        headers = {"Authorization": f"Bearer {token}"} if token else None
        # One pooled session for the backend's lifetime: a session per call would pay a TCP handshake each time.
        self._http = HttpSession(timeout_s=timeout_s, max_in_flight=max_connections, headers=headers)

    # A retrieval server of this project: its /health shows the index it serves, and one search costs nothing.
    probed_before_run = True

    @classmethod
    def secret_envs(cls, config: SearchConfig) -> list[str]:
        return [config.token_env]

    @classmethod
    def identity(cls, config: SearchConfig) -> dict[str, Any]:
        index = index_identity(served_manifest(config.urls, os.environ.get(config.token_env)))
        return {"backend": config.backend, "index": index, "options": {}}

    @classmethod
    def health_probes(cls, config: SearchConfig) -> list[HealthProbe]:
        return [HealthProbe(u, config.token_env, "/search", {"queries": [], "top_k": 0}) for u in config.urls]

    @classmethod
    def from_config(cls, config: SearchConfig) -> HttpSearchBackend:
        return cls(
            config.urls,
            timeout_s=config.timeout_s,
            retries=config.retries,
            deadline_s=config.deadline_s,
            backoff_s=config.backoff_s,
            backoff_max_s=config.backoff_max_s,
            token=os.environ.get(config.token_env),
        )

    # The endpoint and its body: this project's `/search` contract (searchrl/search/retrieve.py speaks Search-R1's).
    PATH = "/search"

    def payload(self, queries: list[str], top_k: int) -> dict[str, Any]:
        return {"queries": queries, "top_k": top_k}

    def parse(self, body: Any) -> list:
        return _results(body)

    def passages(self, results: list) -> list[list[Passage]]:
        return [[Passage(str(p["id"]), p["title"], p["text"], float(p["score"])) for p in hits] for hits in results]

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if not queries:
            return []
        payload = self.payload(queries, top_k)
        try:
            results = await self._http.call_json(
                "POST", lambda: f"{next(self._next)}{self.PATH}", payload, parse=self.parse, retry=self._retry
            )
        except RequestEncodingError as exc:
            raise SearchError(f"search not sent: {exc}") from None
        except HttpRefusedError as exc:
            if exc.status in (401, 403):
                raise SearchAuthError(
                    f"{exc.url} refused the credentials: HTTP {exc.status}; set the retrieval server's token in the "
                    "variable search.token_env names (default $SEARCHRL_SEARCH_TOKEN) on the submitting shell"
                ) from None
            if exc.status == 402:
                raise SearchBudgetError(f"{exc.url}: the web search budget is spent: {exc.text[:500]}") from None
            raise SearchRefusedError(f"{exc.url} refused the request: HTTP {exc.status}: {exc.text[:500]}") from None
        except RetryableError as exc:
            raise SearchError(
                f"search failed after {exc.tries} tries within the {self.deadline_s:g} s deadline: {exc}"
            ) from None
        if len(results) != len(queries):
            raise SearchError(f"malformed search response: {len(results)} result lists for {len(queries)} queries")
        try:
            return self.passages(results)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SearchError(f"malformed search response: {exc!r}") from exc

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> HttpSearchBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
