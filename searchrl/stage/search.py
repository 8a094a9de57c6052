"""A stage's `search:` section: the search backends' schema (`search_backend/settings.py`) plus the LLM router
(`searchrl/routing/`), which answers through the search interface; the episode opens it
(`searchrl/rollout/backends.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from search_backend.settings import SearchConfig
from searchrl.routing.llm_router import RouterConfig


class StageSearchConfig(SearchConfig):
    backend: Literal["local", "bm25", "hybrid", "http", "web", "router"] = "http"  # type: ignore[assignment]
    router: RouterConfig | None = Field(default=None, description="the LLM pool, for backend: router")
