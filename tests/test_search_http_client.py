import asyncio

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from search_backend.serve.app import ServerConfig, create_app
from searchrl.process import free_port
from searchrl.search.backends import SearchConfig, open_backend
from searchrl.search.base import Passage, SearchError
from searchrl.search.http_client import HttpSearchBackend
from tests.conftest import serve as running_server


class NamedBackend:
    """Answers every query with passages that say which server produced them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        self.calls += 1
        return [[Passage(f"{self.name}-{i}", self.name, q, 1.0 - i / 10) for i in range(top_k)] for q in queries]

    async def aclose(self) -> None:
        return None


def flaky_app(failures: int) -> tuple[FastAPI, list[int]]:
    app = FastAPI()
    seen: list[int] = []

    @app.post("/search")
    async def search(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(1)
        if len(seen) <= failures:
            return JSONResponse(status_code=503, content={"detail": "warming up"})
        hits = [[{"id": "x", "title": "t", "text": q, "score": 0.5}] for q in body["queries"]]
        return JSONResponse({"results": hits})

    return app, seen


def test_round_robin_over_servers():
    a, b = NamedBackend("a"), NamedBackend("b")
    config = ServerConfig(batching=False, cache_size=0, token="")
    with (
        running_server(create_app(config, backend=a)) as url_a,
        running_server(create_app(config, backend=b)) as url_b,
    ):

        async def go() -> list[list[list[Passage]]]:
            async with HttpSearchBackend(f"{url_a},{url_b}", retries=0) as client:
                return [await client.search([f"q{i}", "other"], 2) for i in range(6)]

        results = asyncio.run(go())
    assert a.calls == 3 and b.calls == 3
    assert [r[0][0].title for r in results] == ["a", "b"] * 3
    assert results[0][0] == [Passage("a-0", "a", "q0", 1.0), Passage("a-1", "a", "q0", 0.9)]
    assert results[0][1][0].text == "other"


def test_retries_with_backoff_then_succeeds():
    app, seen = flaky_app(failures=2)
    with running_server(app) as url:
        hits = asyncio.run(_search(HttpSearchBackend(url, retries=3, backoff_s=0.01), ["hello"], 1))
    assert len(seen) == 3
    assert hits == [[Passage("x", "t", "hello", 0.5)]]


def test_typed_error_after_the_last_try():
    app, seen = flaky_app(failures=100)
    with running_server(app) as url:
        with pytest.raises(SearchError, match="after 3 tries.*503"):
            asyncio.run(_search(HttpSearchBackend(url, retries=2, backoff_s=0.01), ["hello"], 1))
    assert len(seen) == 3


def test_unreachable_server_is_a_search_error():
    client = HttpSearchBackend(f"http://127.0.0.1:{free_port()}", retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(SearchError, match="after 2 tries.*cannot connect"):
        asyncio.run(_search(client, ["hello"], 1))


def test_client_errors_are_not_retried():
    backend = NamedBackend("a")
    with running_server(create_app(ServerConfig(max_top_k=5, token=""), backend=backend)) as url:
        with pytest.raises(SearchError, match="top_k"):
            asyncio.run(_search(HttpSearchBackend(url, retries=3, backoff_s=0.5), ["hello"], 10))
    assert backend.calls == 0


def test_config_builds_http_backend_from_comma_separated_urls(monkeypatch):
    monkeypatch.setenv("SEARCHRL_SEARCH_TOKEN", "tok")
    backend = open_backend(SearchConfig(backend="http", urls="http://h1:8002, http://h2:8002/", retries=5))
    assert isinstance(backend, HttpSearchBackend)
    assert backend.urls == ["http://h1:8002", "http://h2:8002"] and backend.retries == 5
    assert backend._http.headers["Authorization"] == "Bearer tok"
    asyncio.run(backend.aclose())


async def _search(client: HttpSearchBackend, queries: list[str], top_k: int) -> list[list[Passage]]:
    async with client:
        return await client.search(queries, top_k)
