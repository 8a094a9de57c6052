"""Typed failures of online search; every one is a SearchError so callers need catch only one type."""

from __future__ import annotations

from searchrl.search.base import SearchError


class WebSearchError(SearchError):
    """Base of every online-search failure."""


class MissingCredentialError(WebSearchError):
    """A provider needs an API key or URL from an environment variable that is not set."""


class ProviderError(WebSearchError):
    """The provider could not answer after every try (429, 5xx, timeouts, connection trouble)."""


class ProviderRefusedError(ProviderError):
    """The provider refused the request outright (4xx other than 429); trying again would not help."""


class MalformedResponseError(ProviderError):
    """The provider answered with a body that is not the documented JSON, on every try."""


class CacheMissError(WebSearchError):
    """replay_only is set and the cache holds no answer for this query and these options."""

    ends_run = True  # a replay that answers from anywhere but the recording is not a replay


class WebBudgetExhaustedError(WebSearchError):
    """search.web.max_queries or max_usd is reached; `field` names the limit. The server answers it with 402."""

    ends_run = True  # every later search would be refused too: stop, rather than train on refusals
    http_status = 402

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class SummarizeError(WebSearchError):
    """The summarisation endpoint could not answer after every try."""


class FetchError(WebSearchError):
    """A page could not be fetched; `reason` is a short machine-readable tag."""

    def __init__(self, url: str, reason: str, detail: str = "") -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot fetch {url}: {reason}" + (f" ({detail})" if detail else ""))


class FetchRefusedError(FetchError):
    """The fetch policy refused a page (scheme, address, content type, size, redirects).

    Refusals are deterministic, so a search answered despite one may be cached; a plain FetchError
    (timeout, network, HTTP status) may pass, so such an answer is not.
    """
