"""Serper: Google results. POST {base}/search, X-API-KEY header, {"q", "num"} -> organic[{title, link, snippet}]."""

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


class SerperProvider(Provider):
    name = "serper"
    default_base_url = "https://google.serper.dev"
    key_env = "SERPER_API_KEY"
    max_count = 100

    def request(self, query: str, count: int, site: str | None, with_page_text: bool) -> ProviderRequest:
        return ProviderRequest(
            "POST",
            f"{self.base_url}/search",
            headers={"X-API-KEY": self._api_key or ""},
            json={"q": site_query(query, site), "num": min(count, self.max_count)},
        )

    def parse(self, body: object) -> list[Hit]:
        # Serper leaves "organic" out when Google found nothing; searchParameters is in every real answer.
        absent_ok = isinstance(body, dict) and "searchParameters" in body
        return [
            Hit(required_url(item, "link"), clean_snippet(item.get("title")), clean_snippet(item.get("snippet")), None)
            for item in result_list(body, "organic", absent_ok=absent_ok)
        ]
