"""`SearchConfig`, the stage config's `search:` section as a pydantic schema: which backend, the index settings
(`searchrl.search.index_settings`), the HTTP client's servers, timeouts and retries, and the web-search and MCP
sections.

A schema only, below every backend: the backends read it, and `searchrl.search.backends.open_backend` builds the
backend it names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from searchrl.search.index_settings import IndexSettings
from searchrl.search.mcp_settings import McpConfig
from searchrl.search.web_settings import WebSearchConfig

# As long as the reward client's: the deadline counts the wait for one of the client's slots, which at a rollout
# batch's load is the server's whole backlog. 120 s lost 184 of 3,000 searches to a 59 s restart on a 2-core
# machine slowed to 12 searches/s by other jobs (benchmarks/load.py --restart); training on "search failed"
# blocks is worse than waiting, and a server gone for good still shows within five minutes.
DEFAULT_DEADLINE_S = 300.0


# The search backends by name: the one list the `search:` schema, the retrieval server, the one-shot query command
# and searchrl.search.backends.BACKENDS (which maps each to its class) are read from. The first three search an
# index directory; a stage adds "router" (searchrl/stage/search.py).
INDEX_BACKENDS = ("local", "bm25", "hybrid")
BACKEND_NAMES = (*INDEX_BACKENDS, "http", "retrieve", "web", "mcp")
IndexBackend = Literal[INDEX_BACKENDS]  # type: ignore[valid-type]
BackendName = Literal[BACKEND_NAMES]  # type: ignore[valid-type]


class SearchConfig(IndexSettings):
    backend: BackendName = "http"
    urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:8002"])
    timeout_s: float = Field(default=30.0, gt=0)
    retries: int | None = Field(
        default=None, ge=0, description="at most this many extra tries (null: as many as deadline_s allows)"
    )
    deadline_s: float = Field(
        default=DEFAULT_DEADLINE_S,
        gt=0,
        description="how long one search keeps retrying, waits included: it must outlast a server restart",
    )
    backoff_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8.0, ge=0)
    token_env: str = "SEARCHRL_SEARCH_TOKEN"
    web: WebSearchConfig | None = Field(default=None, description="the web-search settings, for backend: web")
    mcp: McpConfig | None = Field(default=None, description="the MCP server and its search tool, for backend: mcp")

    @field_validator("urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        if isinstance(value, str):
            return [u.strip() for u in value.split(",") if u.strip()]
        return value
