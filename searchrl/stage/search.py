"""A stage's `search:` section: the search backends' schema (`searchrl/search/settings.py`) plus the LLM router
(`searchrl/routing/`), which answers through the search interface; the episode opens it
(`searchrl/rollout/backends.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from searchrl.routing.llm_router import RouterConfig
from searchrl.search.settings import SearchConfig


class StageSearchConfig(SearchConfig):
    backend: Literal["local", "bm25", "hybrid", "http", "web", "router"] = "http"  # type: ignore[assignment]
    router: RouterConfig | None = Field(default=None, description="the LLM pool, for backend: router")
