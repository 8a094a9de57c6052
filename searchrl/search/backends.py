"""The search backends by name and the one function that opens them: `open_backend` builds the backend a
`SearchConfig` names, from a plain name -> class dict whose keys are the schema's `BACKEND_NAMES`. The LLM router,
which answers through the search interface from the routing package, is picked by the episode's search step
(`searchrl/rollout/search_step.py`).

This module sits above every backend; the schema it reads lives below them, in `searchrl.search.settings`, and is
imported here too, so `from searchrl.search.backends import SearchConfig, open_backend` gives both.
"""

from __future__ import annotations

from searchrl.search.base import BackendTraits, SearchBackend
from searchrl.search.bm25 import BM25Backend
from searchrl.search.http_client import HttpSearchBackend
from searchrl.search.hybrid import HybridBackend
from searchrl.search.local_faiss import LocalFaissBackend
from searchrl.search.mcp_backend import McpSearchBackend
from searchrl.search.retrieve import RetrieveBackend
from searchrl.search.settings import BACKEND_NAMES, SearchConfig
from searchrl.search.web import WebSearchBackend

__all__ = ["BACKENDS", "SearchConfig", "open_backend"]

BACKENDS: dict[str, type[BackendTraits]] = {
    "local": LocalFaissBackend,
    "bm25": BM25Backend,
    "hybrid": HybridBackend,
    "http": HttpSearchBackend,
    "retrieve": RetrieveBackend,
    "web": WebSearchBackend,
    "mcp": McpSearchBackend,
}
if tuple(BACKENDS) != BACKEND_NAMES:
    raise ImportError(
        f"searchrl.search.backends.BACKENDS {tuple(BACKENDS)} differ from the schema's names {BACKEND_NAMES}"
    )


def open_backend(config: SearchConfig) -> SearchBackend:
    return BACKENDS[config.backend].open(config)
