"""Brave Search: GET {base}/res/v1/web/search?q=&count=, X-Subscription-Token -> web.results[{title, url, ...}]."""

from __future__ import annotations

from searchrl.search.web.provider import (
    Hit,
    Provider,
    ProviderRequest,
    clean_snippet,
    required_url,
    result_list,
    site_query,
)


class BraveProvider(Provider):
    name = "brave"
    default_base_url = "https://api.search.brave.com"
    key_env = "BRAVE_API_KEY"
    max_count = 20

    def request(self, query: str, count: int, site: str | None, with_page_text: bool) -> ProviderRequest:
        return ProviderRequest(
            "GET",
            f"{self.base_url}/res/v1/web/search",
            headers={"X-Subscription-Token": self._api_key or "", "Accept": "application/json"},
            params={"q": site_query(query, site), "count": min(count, self.max_count)},
        )

    def parse(self, body: object) -> list[Hit]:
        # Brave omits the "web" block when a query has no web results; "query" is in every real answer.
        absent_ok = isinstance(body, dict) and "query" in body
        items = result_list(body, "web", "results", absent_ok=absent_ok)
        return [
            Hit(
                required_url(item, "url"),
                clean_snippet(item.get("title")),
                clean_snippet(item.get("description")),
                None,
            )
            for item in items
        ]
