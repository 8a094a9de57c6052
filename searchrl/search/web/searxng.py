"""SearXNG (self-hosted metasearch): GET {base}/search?q=&format=json -> results[{title, url, content, score}].

The instance must list `json` under search.formats in its settings.yml, or it answers 403.
"""

from __future__ import annotations

import os

from searchrl.search.web.errors import MissingCredentialError
from searchrl.search.web.provider import (
    Hit,
    Provider,
    ProviderRequest,
    clean_snippet,
    optional_score,
    required_url,
    result_list,
    site_query,
)


class SearxngProvider(Provider):
    name = "searxng"
    default_base_url = ""
    key_env = None
    url_env = "SEARXNG_URL"

    @classmethod
    def from_env(cls, base_url: str | None = None, key_env: str | None = None, require_key: bool = True) -> Provider:
        base = base_url or os.environ.get(cls.url_env)
        if not base and require_key:
            raise MissingCredentialError(
                f"searxng: set base_url in the config or the environment variable {cls.url_env} to your instance's URL"
            )
        # A replay needs no instance; the placeholder is never contacted.
        return cls(None, base or "http://searxng.invalid")

    def refusal_hint(self, status: int) -> str:
        return " (does the instance list json under search.formats in settings.yml?)" if status == 403 else ""

    def request(self, query: str, count: int, site: str | None, with_page_text: bool) -> ProviderRequest:
        # SearXNG has no result-count parameter: one page holds about 10-20, and the backend cuts to top_k.
        return ProviderRequest(
            "GET", f"{self.base_url}/search", params={"q": site_query(query, site), "format": "json"}
        )

    def parse(self, body: object) -> list[Hit]:
        return [
            Hit(
                required_url(item, "url"),
                clean_snippet(item.get("title")),
                clean_snippet(item.get("content")),
                optional_score(item),
            )
            for item in result_list(body, "results")
        ]
