"""What an episode's search step opens, by name: a search backend (`search_backend/config.py`) or the LLM
router (`routing/`). Routing answers through the search interface and so imports search_backend; the name
that picks the router therefore lives here, above both, and the search backends stay a dict of their own."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from routing.llm_router import LLMRouterBackend, RouterConfig
from search_backend.base import SearchBackend
from search_backend.config import SearchConfig
from search_backend.config import open_backend as open_search_backend


class StageSearchConfig(SearchConfig):
    backend: Literal["local", "bm25", "hybrid", "http", "web", "router"] = "http"  # type: ignore[assignment]
    router: RouterConfig | None = Field(default=None, description="the LLM pool, for backend: router")


def open_backend(config: StageSearchConfig) -> SearchBackend:
    # The router keeps its options in a section of its own, as the web backend does.
    if config.backend == "router":
        if config.router is None:
            raise ValueError("search.router: required for backend: router (the pool of models)")
        return LLMRouterBackend.from_config(config.router)
    return open_search_backend(config)
