"""WebSearchBackend: the search interface over a web search API, with cache, rate limit, retries, fetch, summaries."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

import httpx

from searchrl.http_transport import (
    HttpSession,
    NotSentError,
    RequestEncodingError,
    RetryableError,
    encode_json,
    with_retries,
)
from searchrl.openai_client import key_from_env
from searchrl.search.base import BackendTraits, Passage, normalise_query
from searchrl.search.web.brave import BraveProvider
from searchrl.search.web.budget import WebBudget
from searchrl.search.web.cache import WebCache, cache_key
from searchrl.search.web.errors import (
    CacheMissError,
    FetchError,
    FetchRefusedError,
    MalformedResponseError,
    ProviderError,
    ProviderRefusedError,
    WebBudgetExhaustedError,
    WebSearchError,
)
from searchrl.search.web.exa import ExaProvider
from searchrl.search.web.fetch import FetchPolicy, fetch_page
from searchrl.search.web.provider import Hit, Provider
from searchrl.search.web.ratelimit import TokenBucket
from searchrl.search.web.searxng import SearxngProvider
from searchrl.search.web.serper import SerperProvider
from searchrl.search.web.summarize import INSTRUCTION, Summarizer
from searchrl.search.web.tavily import TavilyProvider
from searchrl.search.web_settings import WebSearchConfig

log = logging.getLogger(__name__)

PROVIDERS: dict[str, type[Provider]] = {
    "serper": SerperProvider,
    "brave": BraveProvider,
    "tavily": TavilyProvider,
    "searxng": SearxngProvider,
    "exa": ExaProvider,
}


class _Malformed(RetryableError):
    """A body that is not the provider's documented JSON; retried, then reported as MalformedResponseError."""


def web_options(web: WebSearchConfig | None) -> dict[str, Any]:
    """The web options that change what a search returns."""
    if web is None:
        return {}
    return {"provider": web.provider, "site": web.site, "fetch_pages": web.fetch_pages, "summarize": web.summarize}


class WebSearchBackend(BackendTraits):
    def __init__(
        self,
        provider: Provider,
        *,
        site: str | None = None,
        top_k: int = 3,
        fetch_pages: bool = False,
        fetch_policy: FetchPolicy | None = None,
        max_page_chars: int = 3000,
        max_concurrent_fetches: int = 8,
        summarizer: Summarizer | None = None,
        cache: WebCache | None = None,
        replay_only: bool = False,
        rate_limit_per_s: float | None = 1.0,
        rate_limit_burst: int = 1,
        retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        retry_after_max_s: float = 60.0,
        timeout_s: float = 30.0,
        budget: WebBudget | None = None,
    ) -> None:
        if summarizer is not None and not fetch_pages:
            raise ValueError("summarizer: needs fetch_pages=True")
        if replay_only and cache is None:
            raise ValueError("replay_only: needs a cache")
        self.provider = provider
        self.site = site
        self.top_k = top_k
        self.fetch_pages = fetch_pages
        self.fetch_policy = fetch_policy or FetchPolicy()
        self.max_page_chars = max_page_chars
        self.summarizer = summarizer
        self.cache = cache
        self.replay_only = replay_only
        self.provider_calls = 0
        self.web_budget = budget if budget is not None else WebBudget(provider.name)
        self._retry = {
            "retries": retries,
            "backoff_s": backoff_s,
            "backoff_max_s": backoff_max_s,
            "retry_after_max_s": retry_after_max_s,
        }
        self._bucket = TokenBucket(rate_limit_per_s, rate_limit_burst)
        # One bound for fetches and summaries alike: a large batch must not open hundreds of pages or LLM calls.
        self._page_slots = asyncio.Semaphore(max_concurrent_fetches)
        self._inflight: dict[str, asyncio.Future[list[Passage]]] = {}
        # Keys travel per request, never as session defaults, so the page client below can never send one.
        self._api = HttpSession(timeout_s=timeout_s)
        self._pages = httpx.AsyncClient(
            timeout=httpx.Timeout(self.fetch_policy.timeout_s),
            trust_env=False,
            follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    @classmethod
    def open(cls, config: Any) -> WebSearchBackend:
        return cls.from_config(config.web or WebSearchConfig())

    @classmethod
    def secret_envs(cls, config: Any) -> list[str]:
        web = config.web or WebSearchConfig()
        names = [web.api_key_env or PROVIDERS[web.provider].key_env or ""]
        return [*names, web.summarizer_api_key_env] if web.summarize else names

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        return {"backend": config.backend, "index": None, "options": web_options(config.web)}

    @classmethod
    def check_shared(cls, config: Any) -> None:
        """A training job opens the web backend in every vLLM engine process: a limit counted in each would let the
        run spend it once per engine. With a limit set, the processes must share one meter, on a local disk."""
        web = config.web
        if web is None or (web.max_queries is None and web.max_usd is None):
            return
        limit = "max_queries" if web.max_queries is not None else "max_usd"
        if web.budget_path is None or not web.budget_path.is_absolute():
            raise ValueError(
                f"web.{limit}: a run's engines each open the web backend; set web.budget_path to an absolute path "
                "on the node's local disk (e.g. /tmp/searchrl/web_budget.sqlite) so they share one meter"
            )

    @classmethod
    def from_config(cls, config: WebSearchConfig) -> WebSearchBackend:
        provider = PROVIDERS[config.provider].from_env(
            config.base_url, config.api_key_env, require_key=not config.replay_only
        )
        summarizer = None
        if config.summarize:
            summarizer = Summarizer(
                config.summarizer_base_url,
                config.summarizer_model,
                key_from_env(config.summarizer_api_key_env),
                key_env=config.summarizer_api_key_env,
                timeout_s=config.timeout_s,
                retries=config.retries,
                backoff_s=config.backoff_s,
                backoff_max_s=config.backoff_max_s,
                retry_after_max_s=config.retry_after_max_s,
            )
        policy = FetchPolicy(
            max_bytes=config.fetch_max_bytes,
            timeout_s=config.fetch_timeout_s,
            max_redirects=config.fetch_max_redirects,
            allow_private=config.allow_private,
        )
        return cls(
            provider,
            site=config.site,
            top_k=config.top_k,
            fetch_pages=config.fetch_pages,
            fetch_policy=policy,
            max_page_chars=config.max_page_chars,
            max_concurrent_fetches=config.max_concurrent_fetches,
            summarizer=summarizer,
            cache=WebCache(config.cache_path) if config.cache_path else None,
            replay_only=config.replay_only,
            rate_limit_per_s=config.rate_limit_per_s,
            rate_limit_burst=config.rate_limit_burst,
            retries=config.retries,
            backoff_s=config.backoff_s,
            backoff_max_s=config.backoff_max_s,
            retry_after_max_s=config.retry_after_max_s,
            timeout_s=config.timeout_s,
            budget=WebBudget.from_config(config),
        )

    def cache_options(self, top_k: int) -> dict[str, Any]:
        """Everything besides provider and query that changes an answer; the cache key is built from it."""
        options: dict[str, Any] = {
            "site": self.site,
            "count": top_k,
            "fetch": self.fetch_pages,
            "summarize": self.summarizer is not None,
            "model": None,
        }
        if self.fetch_pages and self.summarizer is None:
            options["max_page_chars"] = self.max_page_chars
        if self.summarizer is not None:
            options["model"] = self.summarizer.model
            options["instruction"] = hashlib.sha256(INSTRUCTION.encode()).hexdigest()[:16]
        return options

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        return list(await asyncio.gather(*(self._search_one(q, top_k) for q in queries)))

    async def _search_one(self, raw_query: str, top_k: int) -> list[Passage]:
        query = normalise_query(raw_query)
        if not query:
            return []
        options = self.cache_options(top_k)
        key = cache_key(self.provider.name, query, options)
        if self.cache is not None and (cached := self.cache.get(key)) is not None:
            self.web_budget.cache_hit()
            return cached.passages
        if self.replay_only:
            raise CacheMissError(f"replay_only: no cached {self.provider.name} answer for {query!r} with {options}")
        # Identical queries in flight at once share one provider call, so a batch never pays twice either.
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._answer(query, top_k, key, options))
            self._inflight[key] = task
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        try:
            return list(await asyncio.shield(task))
        except WebBudgetExhaustedError as exc:
            if self.web_budget.on_exhausted == "notice":
                return [self.web_budget.notice(exc)]
            raise

    async def _answer(self, query: str, top_k: int, key: str, options: dict[str, Any]) -> list[Passage]:
        hits: dict[str, Hit] = {}
        for hit in await self._ask_provider(query, top_k):
            hits.setdefault(hit.url, hit)
        passages, cacheable = await self._passages(query, list(hits.values())[:top_k])
        if self.cache is not None and cacheable:
            self.cache.put(key, self.provider.name, query, options, passages)
        return passages

    def _redact(self, text: str) -> str:
        for secret in self.provider.secrets:
            text = text.replace(secret, "***")
        return text

    async def _ask_once(self, query: str, top_k: int) -> list[Hit]:
        request = self.provider.request(query, top_k, self.site, self.fetch_pages)
        name = self.provider.name
        try:
            body = None if request.json is None else encode_json(request.json)
        except RequestEncodingError as exc:
            raise WebSearchError(f"{name}: search not sent: {exc}") from None
        charge = self.web_budget.reserve(min(top_k, self.provider.max_count))
        billed = False
        try:
            await self._bucket.acquire()
            self.provider_calls += 1
            billed = True  # once sending starts only a clear "not served" gives the reservation back
            try:
                response = await self._api.send(
                    request.method, request.url, body=body, params=request.params, headers=request.headers
                )
            except RetryableError as exc:
                # Only a connection that never opened is known unserved; a timeout or a dropped connection may
                # have been served and billed.
                billed = not isinstance(exc, NotSentError)
                raise RetryableError(self._redact(f"{name}: {exc}")) from None
            billed = response.status < 300
        finally:
            if not billed:
                self.web_budget.release(charge)
        if response.status == 429 or response.status >= 500:
            raise RetryableError(f"{name}: HTTP {response.status}", response.retry_after_s)
        if response.status >= 400:
            raise ProviderRefusedError(
                f"{name} refused the request: HTTP {response.status}"
                f"{self.provider.refusal_hint(response.status)}: "
                f"{self._redact(response.text[:300])}"
            )
        try:
            return self.provider.parse(response.json())
        except ValueError as exc:
            raise _Malformed(f"{name}: response is not JSON ({type(exc).__name__})") from None
        except MalformedResponseError as exc:
            raise _Malformed(f"{name}: {exc}") from None

    async def _ask_provider(self, query: str, top_k: int) -> list[Hit]:
        try:
            return await with_retries(lambda: self._ask_once(query, top_k), **self._retry)
        except _Malformed as exc:
            raise MalformedResponseError(f"{exc} (after {self._retry['retries'] + 1} tries)") from None
        except RetryableError as exc:
            raise ProviderError(f"{exc} (after {self._retry['retries'] + 1} tries)") from None

    async def _passages(self, query: str, hits: list[Hit]) -> tuple[list[Passage], bool]:
        texts: list[tuple[str, bool]] = [(hit.text, True) for hit in hits]
        if self.fetch_pages:
            texts = list(await asyncio.gather(*(self._page_text(query, hit) for hit in hits)))
        passages = [
            Passage(hit.url, hit.title, text, hit.score if hit.score is not None else 1.0 / (rank + 1))
            for rank, (hit, (text, _)) in enumerate(zip(hits, texts, strict=True))
        ]
        if all(hit.score is not None for hit in hits):
            passages.sort(key=lambda p: -p.score)
        return passages, all(ok for _, ok in texts)

    async def _page_text(self, query: str, hit: Hit) -> tuple[str, bool]:
        """The text to show for `hit` and whether the answer may be cached (a failed fetch shows the snippet)."""
        page_text = hit.page_text
        if page_text is None:
            try:
                async with self._page_slots:
                    page_text = (await fetch_page(self._pages, hit.url, self.fetch_policy)).text
            except FetchRefusedError as exc:
                log.info("%s", exc)
                return hit.text, True
            except FetchError as exc:
                log.warning("%s; using the snippet, and not caching this answer", exc)
                return hit.text, False
        if not page_text.strip():
            return hit.text, True
        if self.summarizer is None:
            return page_text[: self.max_page_chars], True
        async with self._page_slots:
            summary = await self.summarizer.summarize(query, hit.title, page_text)
        return (summary if summary is not None else hit.text), True

    async def aclose(self) -> None:
        await self._api.aclose()
        await self._pages.aclose()
        if self.summarizer is not None:
            await self.summarizer.aclose()
        if self.cache is not None:
            self.cache.close()
        self.web_budget.close()

    async def __aenter__(self) -> WebSearchBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
