"""A stage's `search:` section: the search backends' schema (`searchrl/search/settings.py`) plus the LLM router
(`searchrl/routing/`), which answers through the search interface; the episode opens it
(`searchrl/rollout/search_step.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from searchrl.routing.llm_router import RouterConfig
from searchrl.search.settings import BACKEND_NAMES, SearchConfig


class StageSearchConfig(SearchConfig):
    backend: Literal[(*BACKEND_NAMES, "router")] = "http"  # type: ignore[assignment,valid-type]
    router: RouterConfig | None = Field(default=None, description="the LLM pool, for backend: router")

    @model_validator(mode="after")
    def _one_meter_for_the_run(self) -> StageSearchConfig:
        """A training job opens the web backend in every vLLM engine process: a limit counted in each would let the
        run spend it once per engine. With a limit set, the processes must share one meter, on a local disk."""
        web = self.web
        if self.backend != "web" or web is None or (web.max_queries is None and web.max_usd is None):
            return self
        limit = "max_queries" if web.max_queries is not None else "max_usd"
        if web.budget_path is None or not web.budget_path.is_absolute():
            raise ValueError(
                f"web.{limit}: a run's engines each open the web backend; set web.budget_path to an absolute path "
                "on the node's local disk (e.g. /tmp/searchrl/web_budget.sqlite) so they share one meter"
            )
        return self
