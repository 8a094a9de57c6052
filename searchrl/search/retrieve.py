"""A backend for any server that speaks Search-R1's `/retrieve` contract: its own `retrieval_server.py`, FlashRAG-style
servers, or this project's retrieval server. A user who already runs one keeps it: no index import, no encoder here.

    POST /retrieve {"queries": [...], "topk": k, "return_scores": true}
    -> {"result": [[{"document": {"id": ..., "contents": "\"Title\"\\ntext"}, "score": s}, ...], ...]}

It is the HTTP backend pointed at another path (its round robin, timeouts, retries and deadline), so a
`searchrl search serve --backend retrieve` in front of it adds this project's batching, cache and budget too.
"""

from __future__ import annotations

from typing import Any

from searchrl.search.base import HealthProbe, Passage, unquoted
from searchrl.search.http_client import HttpSearchBackend


def passage(hit: dict[str, Any]) -> Passage:
    """One hit as a passage: the document's first line is its title (wiki-18 quotes it; the quotes go, as `index
    import --layout search-r1` takes them, and Search-R1's protocol renders them back), the rest its text. A server
    that ignores `return_scores` sends the documents alone."""
    document = hit["document"] if "document" in hit else hit
    contents = document["contents"]
    first, newline, rest = contents.partition("\n")
    title, text = (unquoted(first), rest) if newline else ("", contents)
    return Passage(str(document.get("id", "")), title, text, float(hit.get("score", 0.0)))


class RetrieveBackend(HttpSearchBackend):
    PATH = "/retrieve"

    @classmethod
    def identity(cls, config: Any) -> dict[str, Any]:
        return {"backend": config.backend, "index": None, "options": {"urls": list(config.urls)}}

    @classmethod
    def health_probes(cls, config: Any) -> list[HealthProbe]:
        return []  # the /retrieve contract has no /health; a run's probe search checks it instead

    def payload(self, queries: list[str], top_k: int) -> dict[str, Any]:
        return {"queries": queries, "topk": top_k, "return_scores": True}

    def parse(self, body: Any) -> list:
        results = body["result"]
        if not isinstance(results, list):
            raise TypeError("result is not a list")
        return results

    def passages(self, results: list) -> list[list[Passage]]:
        return [[passage(hit) for hit in hits] for hits in results]
