"""Online search: web search APIs behind the project's search interface."""

from search_backend.web.backend import PROVIDERS, WebSearchBackend
from search_backend.web.budget import LIST_PRICES, WebBudget
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
    WebBudgetExhaustedError,
    WebSearchError,
)
from search_backend.web.fetch import FetchPolicy, fetch_page
from search_backend.web.summarize import Summarizer
from searchrl.search.web_settings import WebSearchConfig

__all__ = [
    "LIST_PRICES",
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
    "WebBudget",
    "WebBudgetExhaustedError",
    "WebCache",
    "WebSearchBackend",
    "WebSearchConfig",
    "WebSearchError",
    "fetch_page",
]
