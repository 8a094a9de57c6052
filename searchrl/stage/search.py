"""A stage's `search:` section: the search backends' schema (`searchrl/search/settings.py`) plus the LLM router
(`searchrl/routing/`), which answers through the search interface; the episode opens it
(`searchrl/rollout/search_step.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from searchrl.routing.llm_router import LLMRouterBackend, RouterConfig
from searchrl.search.backends import BACKENDS
from searchrl.search.base import BackendTraits
from searchrl.search.settings import BACKEND_NAMES, SearchConfig

# What a stage's search step may open: the search backends and the LLM router, by the name `search.backend` gives.
SEARCH_KINDS: dict[str, type[BackendTraits]] = {**BACKENDS, "router": LLMRouterBackend}


class StageSearchConfig(SearchConfig):
    backend: Literal[(*BACKEND_NAMES, "router")] = "http"  # type: ignore[assignment,valid-type]
    router: RouterConfig | None = Field(default=None, description="the LLM pool, for backend: router")

    @property
    def kind(self) -> type[BackendTraits]:
        return SEARCH_KINDS[self.backend]

    @model_validator(mode="after")
    def _opens_in_every_engine(self) -> StageSearchConfig:
        self.kind.check_shared(self)
        return self
