"""The `mcp` search backend against MCP servers on loopback: a minimal independent one (tests/fakes_mcp.py, the
SDK's MCPServer) over streamable HTTP and over stdio, and `searchrl search mcp` over a stand-in backend: passages,
concurrency, the deadline, tool errors by kind, the cache, the budget and the config."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from search_backend.mcp_server import SearchTools, build_server, http_app
from searchrl.config import ConfigError, validate
from searchrl.paths import ROOT
from searchrl.search.backends import BACKENDS, SearchConfig, open_backend
from searchrl.search.base import (
    Passage,
    SearchAuthError,
    SearchBudgetError,
    SearchError,
    SearchRefusedError,
)
from searchrl.search.mcp_backend import McpAnswerError, McpSearchBackend, McpServerError
from searchrl.search.web.errors import WebBudgetExhaustedError
from searchrl.stage.search import StageSearchConfig
from tests.conftest import serve
from tests.fakes_mcp import State, independent


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, State]]:
    state = State()
    with serve(independent(state).streamable_http_app()) as url:
        yield f"{url}/mcp", state


@pytest.fixture
def state(server: tuple[str, State]) -> State:
    fresh = server[1]
    fresh.calls.clear()
    fresh.peak = 0
    return fresh


def backend(url: str, deadline_s: float = 30, **mcp: Any) -> McpSearchBackend:
    return open_backend(SearchConfig(backend="mcp", deadline_s=deadline_s, mcp={"url": url, **mcp}))  # type: ignore


def run(make: Any, *calls: tuple[list[str], int]) -> list[list[list[Passage]]]:
    """Each (queries, top_k) searched in turn through one backend, closed at the end."""

    async def go() -> list[list[list[Passage]]]:
        client = make()
        try:
            return [await client.search(queries, top_k) for queries, top_k in calls]
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_passages_from_structured_answers(server: tuple[str, State], state: State) -> None:
    url = server[0]
    [hits] = run(lambda: backend(url), (["alpha", "beta"], 2))
    assert hits == [
        [Passage("alpha-0", "T", "alpha #0", 1.0), Passage("alpha-1", "T", "alpha #1", 0.9)],
        [Passage("beta-0", "T", "beta #0", 1.0), Passage("beta-1", "T", "beta #1", 0.9)],
    ]
    # A bare list (the SDK wraps it as {"result": [...]}), without titles or scores, and no top_k argument sent.
    [[bare]] = run(lambda: backend(url, tool="bare", top_k_arg=None), (["gamma"], 1))
    assert bare == [Passage("1", "", "gamma only", 1.0)]
    assert run(lambda: backend(url), ([], 3)) == [[]]


def test_queries_go_at_once_bounded_and_each_answered_once_in_order(server: tuple[str, State], state: State) -> None:
    queries = [f"question {i}" for i in range(64)]
    [hits] = run(lambda: backend(server[0], max_in_flight=8), (queries, 1))
    assert [h[0].text for h in hits] == [f"{q} #0" for q in queries]
    assert state.calls == Counter(queries)
    assert 1 < state.peak <= 8


def test_a_slow_tool_fails_retryably_at_the_deadline(server: tuple[str, State]) -> None:
    started = time.monotonic()
    with pytest.raises(SearchError, match="0.5 s deadline") as caught:
        run(lambda: backend(server[0], deadline_s=0.5, tool="slow"), (["a", "b"], 3))
    assert time.monotonic() - started < 3
    assert not isinstance(caught.value, SearchRefusedError) and not caught.value.ends_run


def test_a_tool_error_is_a_refusal(server: tuple[str, State]) -> None:
    with pytest.raises(SearchRefusedError, match="no index for delta"):
        run(lambda: backend(server[0], tool="broken"), (["delta"], 3))
    with pytest.raises(McpAnswerError, match="malformed tool answer"):
        run(lambda: backend(server[0], tool="junk"), (["delta"], 3))
    with pytest.raises(McpServerError, match="has no tool 'missing'"):
        run(lambda: backend(server[0], tool="missing"), (["delta"], 3))


def test_cache_hits_do_not_call_the_server(server: tuple[str, State], state: State) -> None:
    client = backend(server[0])
    first, again = run(lambda: client, (["a", "b"], 2), (["b", " a ", "a"], 2))
    assert state.calls == Counter({"a": 1, "b": 1})
    assert again == [first[1], first[0], first[0]] and client.cache_hits == 3 and client.calls == 2
    # Another top_k is another answer; a cache of 0 keeps nothing.
    run(lambda: client, (["a"], 3))
    run(lambda: backend(server[0], cache_size=0), (["a"], 3), (["a"], 3))
    assert state.calls == Counter({"a": 4, "b": 1})


def test_budget_stops_at_max_calls(server: tuple[str, State], state: State) -> None:
    client = backend(server[0], max_calls=2)

    async def go() -> None:
        await client.search(["p", "q"], 1)
        with pytest.raises(SearchBudgetError, match="max_calls=2"):
            await client.search(["r"], 1)
        assert [h[0].text for h in await client.search(["q", "p"], 1)] == ["q #0", "p #0"]  # cached: free
        await client.aclose()

    asyncio.run(go())
    assert state.calls == Counter({"p": 1, "q": 1}) and SearchBudgetError.ends_run


def test_over_stdio_and_in_a_second_event_loop() -> None:
    # The server starts 1 s late, as one loading its index does: its start is not held to the 0.5 s deadline.
    command = {"command": [sys.executable, "-m", "tests.fakes_mcp", "1"], "cwd": str(ROOT)}
    client = open_backend(SearchConfig(backend="mcp", deadline_s=0.5, mcp=command))
    # asyncio.run twice, as an evaluation's probe and its run do: each loop opens its own session.
    for _ in range(2):
        [hits] = run(lambda: client, (["epsilon", "zeta"], 2))
        assert [[p.text for p in h] for h in hits] == [["epsilon #0", "epsilon #1"], ["zeta #0", "zeta #1"]]
        client._cache.clear()
    for argv, message in [(["/no/such/program"], "cannot start"), ([sys.executable, "-c", "pass"], "did not start")]:
        with pytest.raises(McpServerError, match=message):
            run(lambda: open_backend(SearchConfig(backend="mcp", mcp={"command": argv})), (["x"], 1))  # noqa: B023


class Failing:
    """A stand-in backend for `searchrl search mcp`: each query names the error its search raises."""

    ERRORS = {
        "auth": SearchAuthError("token refused"),
        "budget": SearchBudgetError("budget spent"),
        "web-budget": WebBudgetExhaustedError("web budget spent", field="search.web.max_queries"),
        "refused": SearchRefusedError("query refused"),
        "outage": SearchError("server down"),
        "replay": McpServerError("never recorded"),
    }

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if queries[0] in self.ERRORS:
            raise self.ERRORS[queries[0]]
        return [[Passage("id", "title", q, 0.5)] for q in queries]

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_our_server_tool_errors_raise_the_same_kind(token: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = SearchTools(Failing(), "stand-in")  # type: ignore[arg-type]
    expected = {
        "auth": SearchAuthError,
        "budget": SearchBudgetError,
        "web-budget": SearchBudgetError,
        "refused": SearchRefusedError,
        "outage": SearchError,
        "replay": McpServerError,
    }
    with serve(http_app(build_server(tools), token=token)) as url:
        if token:
            monkeypatch.setenv("SEARCHRL_MCP_TOKEN", "wrong")
            with pytest.raises(SearchAuthError, match="HTTP 401"):
                run(lambda: backend(f"{url}/mcp"), (["fine"], 1))
            monkeypatch.setenv("SEARCHRL_MCP_TOKEN", token)
        [[fine]] = run(lambda: backend(f"{url}/mcp"), (["fine"], 1))
        assert fine == [Passage("id", "title", "fine", 0.5)]
        for query, error in expected.items():
            with pytest.raises(SearchError) as caught:
                run(lambda: backend(f"{url}/mcp", cache_size=0), ([query], 1))
            assert type(caught.value) is error, query


def test_config_section_and_traits() -> None:
    assert BACKENDS["mcp"] is McpSearchBackend
    default = SearchConfig(backend="mcp")
    assert McpSearchBackend.identity(default)["options"] == {"server": "http://127.0.0.1:8003/mcp", "tool": "search"}
    assert McpSearchBackend.secret_envs(default) == ["SEARCHRL_MCP_TOKEN"]
    stdio = SearchConfig(backend="mcp", mcp={"command": "searchrl search mcp --index 'my index'", "env": ["KEY"]})
    assert stdio.mcp is not None and stdio.mcp.command == ["searchrl", "search", "mcp", "--index", "my index"]
    assert McpSearchBackend.secret_envs(stdio) == ["KEY"]
    assert McpSearchBackend.identity(stdio)["options"]["server"] == "searchrl search mcp --index 'my index'"
    for section, field in [
        ({"url": "http://x", "command": "y"}, "mcp: Value error, url and command"),
        ({"url": "ftp://x"}, "mcp.url"),
        ({"max_in_flight": 0}, "mcp.max_in_flight"),
        ({"tools": "search"}, "mcp.tools"),
    ]:
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            validate(SearchConfig, {"backend": "mcp", "mcp": section}, "search")
    # A training job opens one backend per engine: a per-process cap would be spent once per engine.
    with pytest.raises(ValueError, match="mcp.max_calls"):
        StageSearchConfig(backend="mcp", mcp={"max_calls": 10})
    assert StageSearchConfig(backend="mcp").backend == "mcp"
