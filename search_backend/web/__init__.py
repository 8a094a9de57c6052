"""Online search: web search APIs behind the project's search interface."""

from search_backend.web.backend import PROVIDERS, WebSearchBackend
from search_backend.web.cache import WebCache
from search_backend.web.errors import (
    CacheMissError,
    FetchError,
    FetchRefusedError,
    MalformedResponseError,
    MissingCredentialError,
    ProviderError,
    ProviderRefusedError,
    SummarizeError,
    WebSearchError,
)
from search_backend.web.fetch import FetchPolicy, fetch_page
from search_backend.web.summarize import Summarizer
from searchrl.search.web_settings import WebSearchConfig

__all__ = [
    "PROVIDERS",
    "CacheMissError",
    "FetchError",
    "FetchPolicy",
    "FetchRefusedError",
    "MalformedResponseError",
    "MissingCredentialError",
    "ProviderError",
    "ProviderRefusedError",
    "SummarizeError",
    "Summarizer",
    "WebCache",
    "WebSearchBackend",
    "WebSearchConfig",
    "WebSearchError",
    "fetch_page",
]
