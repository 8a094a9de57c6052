"""A stage's `search:` section: the search backends' schema (`searchrl/search/settings.py`) plus the LLM router
(`searchrl/routing/`), which answers through the search interface; the episode opens it
(`searchrl/rollout/search_step.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from searchrl.routing.llm_router import RouterConfig
from searchrl.search.settings import BACKEND_NAMES, SearchConfig


class StageSearchConfig(SearchConfig):
    backend: Literal[(*BACKEND_NAMES, "router")] = "http"  # type: ignore[assignment,valid-type]
    router: RouterConfig | None = Field(default=None, description="the LLM pool, for backend: router")
