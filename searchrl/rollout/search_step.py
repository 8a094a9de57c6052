"""What an episode's search step opens: the search backend or the LLM router the stage's `search.backend` names
(`searchrl/stage/search.py` SEARCH_KINDS). The router answers through the search interface, so a stage's search
may be either, and the search backends stay a dict of their own (`searchrl.search.backends`)."""

from __future__ import annotations

from searchrl.search.base import SearchBackend
from searchrl.stage.search import StageSearchConfig


def open_search_step(config: StageSearchConfig) -> SearchBackend:
    return config.kind.open(config)
