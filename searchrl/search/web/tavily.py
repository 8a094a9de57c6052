"""Tavily: POST {base}/search, Bearer key, {"query", "max_results", "include_raw_content"} -> results[...]."""

from __future__ import annotations

from searchrl.search.web.provider import (
    Hit,
    Provider,
    ProviderRequest,
    clean_snippet,
    optional_score,
    required_url,
    result_list,
)


class TavilyProvider(Provider):
    name = "tavily"
    default_base_url = "https://api.tavily.com"
    key_env = "TAVILY_API_KEY"
    max_count = 20

    def request(self, query: str, count: int, site: str | None, with_page_text: bool) -> ProviderRequest:
        payload: dict[str, object] = {
            "query": query,
            "max_results": min(count, self.max_count),
            "include_raw_content": with_page_text,
        }
        if site:
            payload["include_domains"] = [site]
        return ProviderRequest(
            "POST", f"{self.base_url}/search", headers={"Authorization": f"Bearer {self._api_key or ''}"}, json=payload
        )

    def parse(self, body: object) -> list[Hit]:
        hits = []
        for item in result_list(body, "results"):
            raw = item.get("raw_content")
            hits.append(
                Hit(
                    required_url(item, "url"),
                    clean_snippet(item.get("title")),
                    clean_snippet(item.get("content")),
                    optional_score(item),
                    raw if isinstance(raw, str) and raw.strip() else None,
                )
            )
        return hits
