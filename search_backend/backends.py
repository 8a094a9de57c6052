"""Search backend selection: `open_backend` builds the backend a `SearchConfig` names, from a plain name -> class
dict. The LLM router, a backend of the routing package above this one, is picked by name in
`searchrl/rollout/backends.py`.

This module sits above every backend; the schema it reads lives below them, in `searchrl.search.settings`, and is
imported here too, so `from search_backend.backends import SearchConfig, open_backend` gives both.
"""

from __future__ import annotations

from search_backend.bm25 import BM25Backend
from search_backend.hybrid import HybridBackend
from search_backend.local_faiss import LocalFaissBackend
from search_backend.web import WebSearchBackend, WebSearchConfig
from searchrl.search.base import SearchBackend
from searchrl.search.http_client import HttpSearchBackend
from searchrl.search.settings import SearchConfig

__all__ = ["BACKENDS", "SearchConfig", "open_backend"]

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
