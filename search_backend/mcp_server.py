"""`searchrl search mcp`: any search backend of this project as an MCP server (the official SDK), over stdio or
streamable HTTP. Tools: `search(query, top_k)`, answering `{"results": [{"id", "title", "text", "score"}]}` best
first, and `health`, the retrieval server's `/health` answer with the backend's name.

The backend is the one `open_backend(SearchConfig)` opens (`--index DIR`, `--search FILE`, `key=value`), so its own
budget and cache apply; the retrieval server's result cache, micro-batching and request limits sit in front of it.
A failed search is a tool error naming its kind (searchrl/search/mcp_backend.py: ERROR_KINDS), so the `mcp`
backend raises the error the backend here raised.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from search_backend.serve.app import SearchService, ServerConfig
from searchrl.config import ConfigError, apply_override, parse_overrides, read_yaml, validate
from searchrl.search.base import SearchBackend, SearchError
from searchrl.search.index.cpu_threads import short_openmp_spin
from searchrl.search.index.layout import IndexValidationError
from searchrl.search.mcp_backend import error_kind
from searchrl.search.settings import SearchConfig
from searchrl.search.web.errors import WebBudgetExhaustedError
from searchrl.server import Limits, RequestError, RequestGuard, server_token, uvicorn_options

log = logging.getLogger("search_backend.mcp_server")
TOKEN_ENV = "SEARCHRL_MCP_TOKEN"
DEFAULT_PORT = 8003
DEFAULT_TOP_K = 5


class Hit(BaseModel):
    id: str
    title: str
    text: str
    score: float


class SearchResults(BaseModel):
    results: list[Hit] = Field(description="the query's passages, best first")


def tool_error(kind: str, message: str) -> CallToolResult:
    """A failed search as a tool error: the text for a model to read, the kind for the `mcp` backend."""
    return CallToolResult(
        content=[TextContent(type="text", text=f"{kind}: {message}")],
        structured_content={"error": kind, "message": message},
        is_error=True,
    )


class SearchTools:
    """What the tools answer from: the backend behind the retrieval server's SearchService, started in the server's
    lifespan (once, for every session) and closed at its end, with the backend unless the caller keeps it."""

    def __init__(
        self, backend: SearchBackend, name: str, config: ServerConfig | None = None, *, owned: bool = True
    ) -> None:
        self.backend = backend
        self.name = name
        self.config = config or ServerConfig()
        self.owned = owned
        self.service: SearchService | None = None

    @contextlib.asynccontextmanager
    async def running(self, _server: Any) -> AsyncIterator[None]:
        service = SearchService(self.backend, self.config)
        if service.batcher:
            service.batcher.start()
        self.service = service
        try:
            yield
        finally:
            self.service = None
            await service.stop()
            if self.owned:
                await self.backend.aclose()

    async def search(
        self,
        query: Annotated[str, Field(description="what to search for")],
        top_k: Annotated[int, Field(description="how many passages to return")] = DEFAULT_TOP_K,
    ) -> Annotated[CallToolResult, SearchResults]:
        """Search the corpus: the passages that best answer the query, best first."""
        assert self.service is not None, "the server's lifespan starts the service"
        try:
            self.service.validate([query], top_k, "query", "top_k")
            hits = (await self.service.search([query], top_k))[0]
        except RequestError as exc:
            return tool_error("refused", str(exc))
        except WebBudgetExhaustedError as exc:
            return tool_error("budget", str(exc))
        except SearchError as exc:
            return tool_error(error_kind(exc), str(exc))
        body = {"results": [p.to_dict() for p in hits]}
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))], structured_content=body)

    def health(self) -> dict[str, Any]:
        """The search service's state: backend, index manifest, cache and batching counters, web budget."""
        assert self.service is not None, "the server's lifespan starts the service"
        return {"backend": self.name, **self.service.health()}


def build_server(tools: SearchTools, log_level: str = "WARNING") -> MCPServer:
    server: MCPServer = MCPServer(
        "searchrl-search",
        instructions="search(query, top_k) returns passages of the corpus, best first; health() the index's state.",
        lifespan=tools.running,
        log_level=log_level.upper(),  # type: ignore[arg-type]
    )
    server.add_tool(tools.search, name="search")
    server.add_tool(tools.health, name="health")
    return server


def http_app(
    server: MCPServer, *, path: str = "/mcp", token: str | None = None, allowed_hosts: list[str] | None = None
) -> ASGIApp:
    """The streamable HTTP app behind the guard the retrieval server uses (searchrl/server.py): the bearer token,
    or without one a Host check against DNS rebinding, then JSON bodies under a size cap."""
    app = server.streamable_http_app(
        streamable_http_path=path,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return RequestGuard(
        app, max_bytes=ServerConfig().max_body_bytes, token=token, open_paths=(), allowed_hosts=allowed_hosts or ()
    )


def search_config(args: argparse.Namespace) -> SearchConfig:
    """The backend's config: a YAML file's `search:`-style mapping, `--index`, then `key=value` overrides."""
    data = read_yaml(args.search) if args.search else {}
    if args.index:
        data["index_dir"] = args.index
        data.setdefault("backend", "local")
    for key, value in parse_overrides(args.overrides):
        apply_override(data, key, value)
    # A backend that searches an index refuses a config without index_dir itself (its from_config names the key).
    return validate(SearchConfig, data, args.search or "searchrl search mcp")


def open_quietly(config: SearchConfig) -> SearchBackend:
    # Over stdio, stdout carries the protocol: whatever loading the index prints goes to stderr instead.
    from searchrl.search.backends import open_backend

    with contextlib.redirect_stdout(sys.stderr):
        return open_backend(config)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="searchrl search mcp", description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", metavar="key=value", help="search config fields, e.g. backend=hybrid")
    p.add_argument("--index", help="an index directory (backend local unless backend=bm25 or hybrid)")
    p.add_argument("--search", help="a YAML file holding a search config (backend, urls, index_dir, web: ...)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio, or streamable HTTP")
    p.add_argument("--host", default="127.0.0.1", help="http: bind address (default loopback only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="http: port")
    p.add_argument("--path", default="/mcp", help="http: the endpoint's path")
    p.add_argument(
        "--allowed-hosts",
        default="",
        help="http, without a token: Host names answered besides loopback names and IP addresses (comma-separated)",
    )
    p.add_argument(
        "--cache-size", type=int, default=ServerConfig().cache_size, help="LRU result-cache entries (0: off)"
    )
    p.add_argument("--no-batching", action="store_true", help="run each search on its own")
    p.add_argument("--max-top-k", type=int, default=ServerConfig().max_top_k, help="largest top_k answered")
    p.add_argument("--log-level", default="warning")
    return p


def main(argv: list[str] | None = None) -> int:
    # Before anything loads torch or FAISS: libgomp reads its spin count once (searchrl/search/index/cpu_threads.py).
    short_openmp_spin()
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = search_config(args)
        backend = open_quietly(config)
    except (ConfigError, ValueError, OSError, SearchError, IndexValidationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    service = ServerConfig(cache_size=args.cache_size, batching=not args.no_batching, max_top_k=args.max_top_k)
    server = build_server(SearchTools(backend, config.backend, service), args.log_level)
    if args.transport == "stdio":
        asyncio.run(server.run_stdio_async())
        return 0
    import uvicorn

    hosts = [h.strip() for h in f"{args.allowed_hosts},{args.host}".split(",") if h.strip()]
    app = http_app(server, path=args.path, token=server_token(None, TOKEN_ENV), allowed_hosts=hosts)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, **uvicorn_options(Limits()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
