"""Online search: web search APIs behind the project's search interface."""

from searchrl.search.web.backend import PROVIDERS, WebSearchBackend
from searchrl.search.web.budget import LIST_PRICES, WebBudget
from searchrl.search.web.cache import WebCache
from searchrl.search.web.errors import (
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
from searchrl.search.web.fetch import FetchPolicy, fetch_page
from searchrl.search.web.summarize import Summarizer
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
