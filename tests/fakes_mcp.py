"""A minimal MCP search server independent of ours, built with the SDK's MCPServer (SDK 1's FastMCP): its `search`
echoes the query; `slow`, `broken`, `junk` and `bare` misbehave as named. `python -m tests.fakes_mcp [DELAY_S]`
serves it over stdio; `independent(state).streamable_http_app()` over HTTP, `state` counting calls and concurrency."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class State:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.in_flight = 0
        self.peak = 0


def independent(state: State) -> MCPServer:
    server: MCPServer = MCPServer("independent", log_level="WARNING")

    @server.tool()
    async def search(query: str, top_k: int = 3) -> dict[str, Any]:
        state.calls[query] += 1
        state.in_flight += 1
        state.peak = max(state.peak, state.in_flight)
        try:
            await asyncio.sleep(0.02)
        finally:
            state.in_flight -= 1
        return {
            "results": [
                {"id": f"{query}-{i}", "title": "T", "text": f"{query} #{i}", "score": 1 - i / 10}
                for i in range(top_k)
            ]
        }

    @server.tool()
    async def slow(query: str, top_k: int = 3) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {"results": []}

    @server.tool()
    def broken(query: str, top_k: int = 3) -> dict[str, Any]:
        raise ToolError(f"no index for {query}")

    @server.tool()
    def junk(query: str, top_k: int = 3) -> dict[str, Any]:
        return {"hits": [query]}

    @server.tool()
    def bare(query: str) -> list[dict[str, Any]]:
        return [{"text": f"{query} only"}, {"text": "second", "id": "b"}]

    return server


if __name__ == "__main__":
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)  # a server loading its index first
    independent(State()).run("stdio")
