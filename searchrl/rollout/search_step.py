"""What an episode's search step opens, by name: a search backend (`searchrl.search.backends.open_backend`) or the
LLM router (`searchrl/routing/`). The router answers through the search interface, so the name that picks it lives
here, above both, and the search backends stay a dict of their own."""

from __future__ import annotations

from searchrl.routing.llm_router import LLMRouterBackend
from searchrl.search.backends import open_backend
from searchrl.search.base import SearchBackend
from searchrl.stage.search import StageSearchConfig


def open_search_step(config: StageSearchConfig) -> SearchBackend:
    # The router keeps its options in a section of its own, as the web backend does.
    if config.backend == "router":
        if config.router is None:
            raise ValueError("search.router: required for backend: router (the pool of models)")
        return LLMRouterBackend.from_config(config.router)
    return open_backend(config)
