"""Search backend selection: a pydantic config and a plain name -> class dict. The LLM router, a backend
of the routing package above this one, is picked by name in `searchrl/rollout/backends.py`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from search_backend.base import SearchBackend
from search_backend.bm25 import BM25Backend
from search_backend.http_client import DEFAULT_DEADLINE_S, HttpSearchBackend
from search_backend.hybrid import HybridBackend
from search_backend.index_settings import IndexSettings
from search_backend.local_faiss import LocalFaissBackend
from search_backend.web import WebSearchBackend, WebSearchConfig


class SearchConfig(IndexSettings):
    backend: Literal["local", "bm25", "hybrid", "http", "web"] = "http"
    urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:8002"])
    timeout_s: float = Field(default=30.0, gt=0)
    retries: int | None = Field(
        default=None, ge=0, description="at most this many extra tries (null: as many as deadline_s allows)"
    )
    deadline_s: float = Field(
        default=DEFAULT_DEADLINE_S,
        gt=0,
        description="how long one search keeps retrying, waits included: it must outlast a server restart",
    )
    backoff_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8.0, ge=0)
    token_env: str = "SEARCHRL_SEARCH_TOKEN"
    web: WebSearchConfig | None = Field(default=None, description="the web-search settings, for backend: web")

    @field_validator("urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        if isinstance(value, str):
            return [u.strip() for u in value.split(",") if u.strip()]
        return value


BACKENDS: dict[str, type] = {
    "local": LocalFaissBackend,
    "bm25": BM25Backend,
    "hybrid": HybridBackend,
    "http": HttpSearchBackend,
    "web": WebSearchBackend,
}


def open_backend(config: SearchConfig) -> SearchBackend:
    # The web backend keeps its options in a section of its own; the others read the top level.
    if config.backend == "web":
        return WebSearchBackend.from_config(config.web or WebSearchConfig())
    return BACKENDS[config.backend].from_config(config)
