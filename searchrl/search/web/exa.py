"""Exa: POST {base}/search, x-api-key, {"query", "numResults", "contents": {"text"}} -> results[...]."""

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

# Exa's text is the page's own text; this cap keeps a documents block short when pages are not summarised.
TEXT_MAX_CHARACTERS = 2000


class ExaProvider(Provider):
    name = "exa"
    default_base_url = "https://api.exa.ai"
    key_env = "EXA_API_KEY"
    max_count = 100

    def request(self, query: str, count: int, site: str | None, with_page_text: bool) -> ProviderRequest:
        payload: dict[str, object] = {
            "query": query,
            "numResults": min(count, self.max_count),
            "contents": {"text": {"maxCharacters": TEXT_MAX_CHARACTERS}},
        }
        if site:
            payload["includeDomains"] = [site]
        return ProviderRequest(
            "POST", f"{self.base_url}/search", headers={"x-api-key": self._api_key or ""}, json=payload
        )

    def parse(self, body: object) -> list[Hit]:
        hits = []
        for item in result_list(body, "results"):
            url = item.get("url") or item.get("id")
            hits.append(
                Hit(
                    required_url({"url": url}, "url"),
                    clean_snippet(item.get("title")),
                    clean_snippet(item.get("text")),
                    optional_score(item),
                )
            )
        return hits
