"""`searchrl search mcp` on the bundled mini corpus index: its search tool over stdio (the SDK's own stdio client
spawning the module) and over streamable HTTP (a real server on loopback) answers what the backend's own search
does, and the `mcp` backend reads those answers back as the same passages."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from search_backend.mcp_server import SearchTools, build_server, http_app, main
from search_backend.serve.app import ServerConfig
from searchrl.paths import ROOT
from searchrl.search.backends import SearchConfig, open_backend
from searchrl.search.base import Passage
from searchrl.search.local_faiss import LocalFaissBackend
from tests.conftest import serve

QUERIES = ["Fort Hood shooting 2009", "who wrote Hamlet", "hurricane season in the Atlantic", "capital of France"]
TOKEN = "mcp-test-token"


@pytest.fixture(scope="module")
def local(mini_index: Path) -> LocalFaissBackend:
    return open_backend(SearchConfig(backend="local", index_dir=mini_index))  # type: ignore[return-value]


@pytest.fixture(scope="module")
def http_url(local: LocalFaissBackend) -> Any:
    # Each search on its own (no micro-batching): the concurrent answers then equal single searches bit for bit.
    tools = SearchTools(local, "local", ServerConfig(batching=False), owned=False)
    with serve(http_app(build_server(tools), token=TOKEN)) as url:
        yield f"{url}/mcp"


def assert_same(got: list[dict[str, Any]], want: list[Passage]) -> None:
    assert [(h["id"], h["title"], h["text"]) for h in got] == [(p.id, p.title, p.text) for p in want]
    assert [h["score"] for h in got] == pytest.approx([p.score for p in want], abs=1e-5)


def test_stdio_search_tool_answers_as_the_backend(mini_index: Path, local: LocalFaissBackend) -> None:
    args = ["-m", "search_backend.mcp_server", "--index", str(mini_index)]
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ), cwd=ROOT)

    async def go() -> tuple[Any, ...]:
        async with Client(params) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            answers = [await client.call_tool("search", {"query": q, "top_k": 3}) for q in QUERIES]
            default_k = await client.call_tool("search", {"query": QUERIES[0]})
            health = await client.call_tool("health", {})
            refused = await client.call_tool("search", {"query": "x", "top_k": 0})
        return tools, answers, default_k, health, refused

    tools, answers, default_k, health, refused = asyncio.run(go())
    assert {"search", "health"} <= set(tools)
    assert tools["search"].output_schema["required"] == ["results"]
    for query, answer in zip(QUERIES, answers, strict=True):
        assert not answer.is_error
        assert_same(answer.structured_content["results"], local.search_sync([query], 3)[0])
    assert len(default_k.structured_content["results"]) == 5
    body = health.structured_content
    assert body["backend"] == "local" and body["status"] == "ok"
    assert body["manifest"]["passages"] == local.manifest["passages"]
    assert refused.is_error and refused.structured_content["error"] == "refused"
    assert "top_k" in refused.structured_content["message"]


def test_http_search_tool_answers_as_the_backend(http_url: str, local: LocalFaissBackend) -> None:
    async def go() -> list[Any]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            async with Client(streamable_http_client(http_url, http_client=http)) as client:
                return [await client.call_tool("search", {"query": q, "top_k": 4}) for q in QUERIES]

    for query, answer in zip(QUERIES, asyncio.run(go()), strict=True):
        assert_same(answer.structured_content["results"], local.search_sync([query], 4)[0])
    # Without the token the guard answers before the MCP app reads anything.
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    reply = httpx.post(http_url, json=initialize, headers={"Accept": "application/json, text/event-stream"})
    assert reply.status_code == 401 and reply.json()["field"] == "Authorization"


def test_mcp_backend_reads_the_server_as_the_backend_itself(
    http_url: str, local: LocalFaissBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEARCHRL_MCP_TOKEN", TOKEN)
    queries = [*QUERIES, *(f"{q} history" for q in QUERIES), QUERIES[0]]

    async def go() -> list[list[Passage]]:
        backend = open_backend(SearchConfig(backend="mcp", deadline_s=60, mcp={"url": http_url}))
        try:
            return await backend.search(queries, 5)
        finally:
            await backend.aclose()

    for got, want in zip(asyncio.run(go()), local.search_sync(queries, 5), strict=True):
        assert_same([p.to_dict() for p in got], want)


def test_command_errors_name_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backend=local"]) == 2
    assert "index_dir" in capsys.readouterr().err
    assert main(["--search", str(tmp_path / "missing.yaml")]) == 2
    assert "no such config file" in capsys.readouterr().err
    assert main(["backend=nope"]) == 2
    assert "backend" in capsys.readouterr().err
    assert main(["--index", str(tmp_path)]) == 2
    assert "manifest.json not found" in capsys.readouterr().err
