"""Async client backend for one or several retrieval servers, with round robin, timeouts and retries."""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING

import httpx
from tenacity import AsyncRetrying, RetryError, retry_if_exception_type, stop_after_attempt, wait_exponential

from search_backend.base import Passage, SearchAuthError, SearchError

if TYPE_CHECKING:
    from search_backend.config import SearchConfig


class _Retryable(Exception):
    """A failure another try (on the next server) may fix: connection trouble, timeout, 5xx, 429."""


class HttpSearchBackend:
    def __init__(self, urls: str | list[str], timeout_s: float = 30.0, retries: int = 3, backoff_s: float = 0.5,
                 backoff_max_s: float = 8.0, token: str | None = None, max_connections: int = 256) -> None:
        self.urls = [u.strip().rstrip("/") for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not self.urls:
            raise ValueError("urls: at least one retrieval server URL is required")
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._next = itertools.cycle(range(len(self.urls)))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # One pooled client for the backend's lifetime: a client per call would pay a TCP handshake each time.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s), headers=headers,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))

    @classmethod
    def from_config(cls, config: SearchConfig) -> HttpSearchBackend:
        return cls(config.urls, timeout_s=config.timeout_s, retries=config.retries, backoff_s=config.backoff_s,
                   backoff_max_s=config.backoff_max_s, token=os.environ.get(config.token_env))

    async def _post_once(self, payload: dict) -> dict:
        url = self.urls[next(self._next)] + "/search"
        try:
            response = await self._client.post(url, json=payload)
        except httpx.HTTPError as exc:
            raise _Retryable(f"{url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500 or response.status_code == 429:
            raise _Retryable(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code in (401, 403):
            raise SearchAuthError(f"{url} refused the credentials: HTTP {response.status_code}; set the retrieval "
                                  "server's token in search.token_env's variable (default $SEARCHRL_SEARCH_TOKEN)")
        if response.status_code >= 400:
            raise SearchError(f"{url} refused the request: HTTP {response.status_code}: {response.text[:500]}")
        try:
            return response.json()
        except ValueError as exc:
            raise _Retryable(f"{url}: response is not JSON") from exc

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if not queries:
            return []
        payload = {"queries": queries, "top_k": top_k}
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=self.backoff_max_s),
            retry=retry_if_exception_type(_Retryable),
        )
        try:
            async for attempt in retrying:
                with attempt:
                    body = await self._post_once(payload)
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            raise SearchError(f"search failed after {self.retries + 1} tries: {cause}") from cause
        try:
            results = body["results"]
            return [[Passage(str(p["id"]), p["title"], p["text"], float(p["score"])) for p in hits]
                    for hits in results]
        except (KeyError, TypeError, ValueError) as exc:
            raise SearchError(f"malformed search response: {exc!r}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> HttpSearchBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
