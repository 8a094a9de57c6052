import asyncio
import json
import time

import aiohttp
import httpx
import pytest

import search_backend.serve.app as serve_module
from search_backend.serve.app import SearchService, ServerConfig, create_app
from tests.conftest import serve as running_server
from tests.test_search_fixtures import QUERIES_1000, fixture_backend, fixture_queries


def same_results(served: list[dict], expected) -> None:
    assert [r["id"] for r in served] == [p.id for p in expected]
    assert [r["text"] for r in served] == [p.text for p in expected]
    assert [r["score"] for r in served] == pytest.approx([p.score for p in expected], abs=1e-4)


async def fire(url: str, queries: list[str], top_k: int) -> list[dict]:
    """Every query on its own connection, all at once, none reused, no retries: the server alone must answer
    1,000 simultaneous requests.

    Not an httpx pool: with 1,000 requests queued on 256 connections its bookkeeping stalled this event loop
    for seconds at a time (measured: 41 s, then 3 s gaps), connections sat idle past uvicorn's 5 s
    keep-alive, the server closed them, and httpx wrote the next request onto a closed one: the ReadError
    that failed this test 2 runs in 5. The server was right to close them.
    """
    connector = aiohttp.TCPConnector(limit=len(queries), force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def one(query: str) -> dict:
            async with session.post(f"{url}/search", json={"queries": [query], "top_k": top_k}) as response:
                response.raise_for_status()
                return (await response.json())["results"][0]

        return await asyncio.gather(*(one(q) for q in queries))


@pytest.mark.parametrize("batching", [True, False])
def test_concurrent_single_query_requests_match_in_process(batching):
    backend = fixture_backend()
    queries = QUERIES_1000.read_text(encoding="utf-8").splitlines()
    if not batching:
        queries = queries[:200]
    expected = backend.search_sync(queries, 5)
    config = ServerConfig(batching=batching, max_batch=64, cache_size=0)
    with running_server(create_app(config, backend=backend)) as url:
        served = asyncio.run(fire(url, queries, 5))
        health = httpx.get(f"{url}/health").json()
    assert len(served) == len(queries)
    for got, want in zip(served, expected, strict=True):
        same_results(got, want)
    if batching:
        assert health["batching"]["enabled"] and health["batching"]["mean_batch"] > 1
    else:
        assert health["batching"] == {"enabled": False}


@pytest.fixture(scope="module")
def server_url():
    config = ServerConfig(max_top_k=50, max_body_bytes=20_000, token="", cache_size=1000)
    with running_server(create_app(config, backend=fixture_backend())) as url:
        yield url


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"queries": [], "top_k": 3}, "queries"),
        ({"queries": ["ok", 5], "top_k": 3}, "queries.1"),
        ({"queries": "not a list", "top_k": 3}, "queries"),
        ({"queries": ["ok"], "top_k": 0}, "top_k"),
        ({"queries": ["ok"], "top_k": 51}, "top_k"),
        ({"queries": ["ok"], "top_k": "3"}, "top_k"),
        ({"top_k": 3}, "queries"),
        ({"queries": ["ok"], "top_k": 3, "extra": 1}, "extra"),
    ],
)
def test_bad_input_gets_422_naming_the_field(server_url, body, field):
    response = httpx.post(f"{server_url}/search", json=body)
    assert response.status_code == 422
    assert response.json()["field"] == field
    assert response.json()["detail"].startswith(field)


def test_invalid_json_and_oversized_body(server_url):
    response = httpx.post(f"{server_url}/search", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
    big = {"queries": ["word " * 5000], "top_k": 3}
    response = httpx.post(f"{server_url}/search", json=big)
    assert response.status_code == 413 and response.json()["field"] == "body"

    def chunks():
        yield json.dumps(big).encode()

    response = httpx.post(f"{server_url}/search", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_r1_searcher_and_search_r1_protocols(server_url):
    query = fixture_queries()[0]["query"]
    hits = fixture_backend().search_sync([query], 3)[0]
    r1 = httpx.post(f"{server_url}/queries", json={"queries": [query], "k": 3}).json()
    assert r1["queries"] == [query]
    assert r1["answers"] == [[p.text if not p.title else f"Title: {p.title} Text: {p.text}" for p in hits]]
    bad = httpx.post(f"{server_url}/queries", json={"queries": [query], "k": 0})
    assert bad.status_code == 422 and bad.json()["field"] == "k"

    scored = httpx.post(f"{server_url}/retrieve", json={"queries": [query], "topk": 3, "return_scores": True}).json()
    assert [d["document"]["id"] for d in scored["result"][0]] == [p.id for p in hits]
    assert scored["result"][0][0]["document"]["contents"] == f'"{hits[0].title}"\n{hits[0].text}'
    assert scored["result"][0][0]["score"] == pytest.approx(hits[0].score, abs=1e-4)
    plain = httpx.post(f"{server_url}/retrieve", json={"queries": [query], "topk": 2}).json()
    assert [d["id"] for d in plain["result"][0]] == [p.id for p in hits[:2]]


def test_health_reports_manifest_and_cache_hit_rate(server_url):
    query = fixture_queries()[1]["query"]
    for _ in range(3):
        httpx.post(f"{server_url}/search", json={"queries": [f"  {query} "], "top_k": 4}).raise_for_status()
    health = httpx.get(f"{server_url}/health").json()
    assert health["manifest"]["model"] == "all-MiniLM-L6-v2"
    assert health["manifest"]["passages"] > 0
    assert health["cache"]["hits"] >= 2 and 0 < health["cache"]["hit_rate"] <= 1


def test_latency_delays_each_request_not_the_others():
    """--latency-s stands in for a web provider: every request waits that long, side by side, and says so."""
    backend = fixture_backend()
    queries = [q["query"] for q in fixture_queries()][:16]
    with running_server(create_app(ServerConfig(latency_s=0.5, cache_size=0), backend=backend)) as url:
        t0 = time.monotonic()
        served = asyncio.run(fire(url, queries, 3))
        took = time.monotonic() - t0
        health = httpx.get(f"{url}/health").json()
    assert 0.5 <= took < 0.5 * len(queries) / 4, took  # overlapped, not one after another
    assert health["latency_s"] == 0.5
    for got, want in zip(served, backend.search_sync(queries, 3), strict=True):
        same_results(got, want)


def test_bearer_token(monkeypatch):
    monkeypatch.setenv("SEARCHRL_SEARCH_TOKEN", "s3cret")
    with running_server(create_app(ServerConfig(), backend=fixture_backend())) as url:
        body = {"queries": ["Fort Hood"], "top_k": 1}
        denied = httpx.post(f"{url}/search", json=body)
        assert denied.status_code == 401 and denied.json()["field"] == "Authorization"
        wrong = httpx.post(f"{url}/search", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = httpx.post(f"{url}/search", json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and len(ok.json()["results"][0]) == 1


def test_freed_memory_is_handed_back_once_idle_not_between_calls(monkeypatch):
    # Trimming after every large batch made the next batch fault the same pages back in; under load the
    # server keeps them, and hands them back once no call has run for RELEASE_IDLE_S.
    released: list[float] = []
    monkeypatch.setattr(serve_module, "release_freed_memory", lambda: released.append(time.monotonic()))
    monkeypatch.setattr(serve_module, "RELEASE_IDLE_S", 0.3)
    queries = QUERIES_1000.read_text(encoding="utf-8").splitlines()
    large = []
    while sum(map(len, large)) < serve_module.RELEASE_AFTER_CHARS:
        large.append(queries[len(large)])
    service = SearchService(fixture_backend(), ServerConfig(batching=False, cache_size=0))

    async def run() -> None:
        for _ in range(3):
            await service.search(large, 3)
        assert released == []
        await asyncio.sleep(0.6)
        assert len(released) == 1
        await service.search(large[:1], 3)
        await asyncio.sleep(0.6)
        assert len(released) == 1, "a small call leaves nothing to hand back"
        await service.search(large, 3)
        await service.stop()
        await asyncio.sleep(0.6)
        assert len(released) == 1, "a stopped service schedules nothing"

    asyncio.run(run())
