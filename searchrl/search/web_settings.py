"""WebSearchConfig: everything an online search run needs, validated; API keys come only from the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, model_validator

PROVIDER_DESCRIPTION = (
    "web search API: serper (Google results), brave, tavily, searxng (self-hosted, base_url or SEARXNG_URL) or exa. "
    "Bing's Web Search API, which R1-Searcher used, was retired by Microsoft in August 2025 and is not offered."
)


class WebSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: Literal["serper", "brave", "tavily", "searxng", "exa"] = Field(
        default="serper", description=PROVIDER_DESCRIPTION
    )
    base_url: str | None = Field(default=None, description="provider API base URL; None for the provider's own")
    api_key_env: str | None = Field(
        default=None,
        description="env var holding the key; None for the provider's "
        "default (SERPER_API_KEY, BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY)",
    )
    site: str | None = Field(default=None, description="restrict results to one site, e.g. en.wikipedia.org")
    top_k: int = Field(default=3, ge=1, le=100)
    fetch_pages: bool = Field(default=False, description="fetch each result's page and use its main text")
    max_page_chars: int = Field(default=3000, ge=100, description="page text kept when pages are not summarised")
    fetch_max_bytes: int = Field(default=2_000_000, ge=1024)
    fetch_timeout_s: float = Field(default=15.0, gt=0)
    fetch_max_redirects: int = Field(default=5, ge=0)
    allow_private: bool = Field(default=False, description="let page fetches reach private/loopback addresses")
    max_concurrent_fetches: int = Field(default=8, ge=1)
    summarize: bool = Field(default=False, description="summarise each fetched page with an LLM (needs fetch_pages)")
    summarizer_base_url: str = "https://api.openai.com/v1"
    summarizer_model: str = "gpt-4o-mini"
    summarizer_api_key_env: str = "OPENAI_API_KEY"
    cache_path: Path | None = Field(default=None, description="SQLite file of answers; None for no cache")
    replay_only: bool = Field(default=False, description="answer only from the cache; a miss is an error")
    rate_limit_per_s: float | None = Field(default=1.0, gt=0, description="provider requests/s; None: no limit")
    rate_limit_burst: int = Field(default=1, ge=1)
    retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8.0, ge=0)
    retry_after_max_s: float = Field(default=60.0, ge=0, description="longest Retry-After wait honoured")
    timeout_s: float = Field(default=30.0, gt=0)
    # The run's budget (searchrl/search/web/budget.py): provider requests and their estimated price, capped.
    max_queries: NonNegativeInt | None = Field(
        default=None, description="provider requests the run may send (cache hits are free); None: no limit"
    )
    max_usd: NonNegativeFloat | None = Field(
        default=None, allow_inf_nan=False, description="estimated USD the run may spend; None: no limit"
    )
    usd_per_query: NonNegativeFloat | None = Field(
        default=None, allow_inf_nan=False, description="price of one provider request; None: the provider's list price"
    )
    on_budget_exhausted: Literal["error", "notice"] = Field(
        default="error",
        description="at a limit: error stops the run; notice answers each query with a 'search budget exhausted' "
        "passage so the policy sees it",
    )
    budget_path: Path | None = Field(
        default=None,
        description="SQLite file of the run's meter, shared by its processes and kept across restarts; "
        "None: each process counts from zero",
    )

    @model_validator(mode="after")
    def _consistent(self) -> WebSearchConfig:
        if self.summarize and not self.fetch_pages:
            raise ValueError("summarize: needs fetch_pages=true (the summariser reads the fetched page)")
        if self.replay_only and self.cache_path is None:
            raise ValueError("replay_only: needs cache_path (answers are replayed from the cache)")
        return self
