"""Hostile and broken input against both servers, started for real on loopback (issue 16, issue 14 item 4).

Each test checks status codes and behaviour, never timings; benchmarks/hostile.py measures event-loop
blocking and memory for the same inputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import tracemalloc
import zlib

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response
from hypothesis import given, settings
from hypothesis import strategies as st

from reward_server.__main__ import build_parser
from reward_server.app import ServerSettings
from reward_server.app import create_app as create_reward_app
from search_backend.serve.app import SearchService, ServerConfig
from search_backend.serve.app import create_app as create_search_app
from search_backend.serve.batching import MicroBatcher
from searchrl import metrics
from searchrl.protocols.segments import _match_ignoring_space, split_solution
from searchrl.reward.spec import STAGE2_ANSWER
from searchrl.search.web import FetchPolicy, FetchRefusedError, fetch_page
from searchrl.search.web.fetch import Page
from searchrl.server import Limits, RequestError, uvicorn_options
from tests.conftest import ROOT, serve
from tests.test_search_fixtures import fixture_backend

PROMPT = "User:Where is the Eiffel Tower?\nAssistant: <think>"
SOLUTION = " Paris. </think><answer> Paris </answer>"
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Short deadlines so the slow-sender tests finish quickly; the defaults are in Limits.
FAST_LIMITS = Limits(header_timeout_s=0.5, body_timeout_s=0.5)


def reward_body(**meta) -> dict:
    return {"query": [PROMPT + SOLUTION], "prompts": [PROMPT], "labels": ["Paris"], "metadata": [meta]}


@pytest.fixture(scope="module")
def reward_url():
    settings_ = ServerSettings(
        spec=STAGE2_ANSWER, max_body_bytes=1_000_000, max_query_chars=100_000, limits=FAST_LIMITS
    )
    with serve(create_reward_app(settings_), **uvicorn_options(FAST_LIMITS)) as url:
        yield url


@pytest.fixture(scope="module")
def reward_token_url():
    settings_ = ServerSettings(spec=STAGE2_ANSWER, token=TOKEN, limits=FAST_LIMITS)
    with serve(create_reward_app(settings_), **uvicorn_options(FAST_LIMITS)) as url:
        yield url


@pytest.fixture(scope="module")
def search_token_url():
    config = ServerConfig(token=TOKEN, cache_size=0, limits=FAST_LIMITS)
    with serve(create_search_app(config, backend=fixture_backend()), **uvicorn_options(FAST_LIMITS)) as url:
        yield url


def post_raw(url: str, path: str, body: bytes, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{url}{path}", content=body, headers={"content-type": "application/json", **(headers or {})})


def raw_exchange(url: str, data: bytes, wait_s: float = 15.0) -> bytes:
    """Send raw bytes, then read until the server answers and closes (or `wait_s` passes: a server that waits)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            return received + b"<still open>"
    return received


# Item 2 and item 9: metadata and labels the scoring cannot use get a 422 naming the field, never a 500.
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"-1", "metadata.0.num_searches"),
        (b'"2"', "metadata.0.num_searches"),
        (b"true", "metadata.0.num_searches"),
        (b"2.5", "metadata.0.num_searches"),
        (b"1" + b"0" * 400, "metadata.0.num_searches"),
        (b"1e400", "metadata.0.num_searches"),
        (b"NaN", "metadata.0.num_searches"),
        (b"Infinity", "metadata.0.num_searches"),
        (b"-Infinity", "metadata.0.num_searches"),
    ],
)
def test_invalid_num_searches_is_a_422_naming_the_field(reward_url, raw, field):
    body = json.dumps(reward_body(num_searches=0)).encode().replace(b'"num_searches": 0', b'"num_searches": ' + raw)
    response = post_raw(reward_url, "/get_reward", body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_valid_num_searches_still_scores(reward_url):
    ok = httpx.post(f"{reward_url}/get_reward", json=reward_body(num_searches=0))
    assert ok.status_code == 200 and ok.json()["rewards"] == [1.0]


def test_labels_nested_too_deep_are_a_422(reward_url):
    nested = "[" * 1000 + "]" * 1000
    as_list = json.dumps({"query": ["x"], "labels": ["PLACEHOLDER"]}).replace('"PLACEHOLDER"', nested)
    response = post_raw(reward_url, "/get_reward", as_list.encode())
    assert response.status_code == 422 and response.json()["field"].startswith("labels.0.0")
    as_string = httpx.post(f"{reward_url}/get_reward", json={"query": ["x"], "labels": [nested]})
    assert as_string.status_code == 422 and as_string.json()["field"] == "labels.0"


# Issue 14 item 4: bodies the schema fuzzers do not produce.
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"query": ["a"], "query": ["b"], "labels": ["x"]}', "query"),
        (b'{"query": ["a"], "labels": ["x"], "metadata": [{"num_searches": 1, "num_searches": -1}]}', "num_searches"),
        (b'{"query": ["caf\xe9"], "labels": ["x"]}', "query.0"),
        (b'{"query": ["\\ud800"], "labels": ["x"]}', "query.0"),
        (
            b'{"query": ["a"], "labels": ["x"], "metadata": [' + b'{"a": ' * 500 + b"1" + b"}" * 500 + b"]}",
            "metadata.0.a.a.a.a.a.a",
        ),
        (b'{"query": ["a"], "labels": ["x"]', "body"),
        (b"", "body"),
    ],
)
def test_hostile_bodies_are_a_422_naming_the_field(reward_url, body, field):
    response = post_raw(reward_url, "/get_reward", body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


# Item 4: query length capped, the prompt matched without per-character objects, a smaller default body cap.
def test_query_and_prompt_length_are_capped(reward_url):
    long = "x" * 100_001
    too_long = httpx.post(f"{reward_url}/get_reward", json={"query": [long], "labels": ["b"]})
    assert too_long.status_code == 422 and too_long.json()["field"] == "query.0"
    too_long = httpx.post(f"{reward_url}/get_reward", json={"query": ["a"], "prompts": [long], "labels": ["b"]})
    assert too_long.status_code == 422 and too_long.json()["field"] == "prompts.0"
    # The largest allowed query whose prompt is not in it: answered, off the event loop (body over 64 KiB).
    missing = httpx.post(
        f"{reward_url}/get_reward", json={"query": ["x " * 50_000], "prompts": ["User: hi"], "labels": ["b"]}
    )
    assert missing.status_code == 422 and missing.json()["field"] == "prompts.0"


def test_default_caps_fit_a_real_episode():
    defaults = build_parser().parse_args(["--preset", "stage2-answer"])
    assert defaults.max_body_mb <= 8 and ServerSettings(spec=STAGE2_ANSWER).max_body_bytes <= 8 * 1024 * 1024
    assert 50_000 <= defaults.max_query_chars <= 1_000_000


def test_prompt_match_ignoring_space_does_not_build_per_character_objects():
    query = ("word " * 800_000) + "User :\n hi   there" + SOLUTION
    tracemalloc.start()
    try:
        assert split_solution(query, "User: hi there") == SOLUTION
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The old per-character position list took over 30x the query's size here.
    assert peak < 3 * len(query)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab \n\t\u00a0\u3000", max_size=30), st.text(alphabet="ab \n\u3000", max_size=6))
def test_prompt_match_ignoring_space_is_exact(query, prompt):
    needle = "".join(prompt.split())
    positions = [i for i, ch in enumerate(query) if not ch.isspace()]
    squeezed = "".join(query[i] for i in positions)
    at = squeezed.find(needle)
    expected = 0 if not needle else None if at < 0 else positions[at + len(needle) - 1] + 1
    assert _match_ignoring_space(query, prompt) == expected


# Item 5 and item 10: the token is checked before the body is read, on both servers.
@pytest.mark.parametrize("server", ["reward_token_url", "search_token_url"])
def test_unauthenticated_bodies_are_never_read(server, request):
    url = request.getfixturevalue(server)
    path = "/get_reward" if server.startswith("reward") else "/search"
    # Announces 60 MB but sends none of it: a server that reads before checking the token would wait.
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000000\r\n\r\n"
    answer = raw_exchange(url, head.encode())
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    chunked = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    assert raw_exchange(url, chunked.encode()).startswith(b"HTTP/1.1 401")


def test_search_parse_errors_name_the_body_after_auth(search_token_url):
    for body in (b"{bad", b'{"queries": ["a"], "queries": ["b"]}', b'{"queries": ["a"], "top_k": NaN}'):
        assert post_raw(search_token_url, "/search", body).status_code == 401
    bad = post_raw(search_token_url, "/search", b"{bad", AUTH)
    assert bad.status_code == 422 and bad.json()["field"] == "body"
    duplicate = post_raw(search_token_url, "/search", b'{"queries": ["a"], "queries": ["b"]}', AUTH)
    assert duplicate.status_code == 422 and duplicate.json()["field"] == "queries"
    for raw in (b"NaN", b"1e400", b"1" + b"0" * 400, b"-1"):
        response = post_raw(search_token_url, "/search", b'{"queries": ["a"], "top_k": ' + raw + b"}", AUTH)
        assert response.status_code == 422 and response.json()["field"] in ("top_k", "body"), response.text


# Item 11: no cross-site simple requests.
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_bodies_must_be_application_json(reward_url, search_token_url, content_type):
    headers = {"content-type": content_type} if content_type else {}
    body = json.dumps(reward_body()).encode()
    response = httpx.post(f"{reward_url}/get_reward", content=body, headers=headers)
    assert response.status_code == 415 and response.json()["field"] == "content-type"
    response = httpx.post(f"{search_token_url}/search", content=b'{"queries": ["a"]}', headers={**headers, **AUTH})
    assert response.status_code == 415
    charset = httpx.post(
        f"{reward_url}/get_reward", content=body, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert charset.status_code == 200


# Item 12: with a token, a bare liveness answer stays open and the details need the token.
@pytest.mark.parametrize("server", ["reward_token_url", "search_token_url"])
def test_health_and_docs_details_need_the_token(server, request):
    url = request.getfixturevalue(server)
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}
    detailed = httpx.get(f"{url}/health", headers=AUTH).json()
    assert ("spec" in detailed) if server.startswith("reward") else ("manifest" in detailed)
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert httpx.get(f"{url}{path}").status_code == 401
        assert httpx.get(f"{url}{path}", headers=AUTH).status_code == 200


def test_reward_health_with_token_keeps_the_spec_shape(reward_token_url):
    detailed = httpx.get(f"{reward_token_url}/health", headers=AUTH).json()
    assert detailed["status"] == "ok" and detailed["spec"] == STAGE2_ANSWER.model_dump(mode="json")


# Item 13: secrets never in a repr.
def test_secrets_are_not_in_reprs():
    config = ServerConfig(token=TOKEN)
    settings_ = ServerSettings(spec=STAGE2_ANSWER, token=TOKEN)
    for text in (repr(config), str(config), config.model_dump_json(), repr(settings_), str(settings_)):
        assert TOKEN not in text
    sources = [p for d in ("search_backend", "searchrl", "reward_server", "eval") for p in (ROOT / d).rglob("*.py")]
    # A class-level field (four spaces in) holding a secret as a plain str would show in the class's repr.
    plain = re.compile(r"^ {4}(token|api_key|key|secret|password)\s*:\s*str\b", re.MULTILINE)
    assert [str(p) for p in sources if plain.search(p.read_text(encoding="utf-8"))] == []


# Item 8: slow senders get a deadline, and too many connections a 503 rather than exhausted descriptors.
@pytest.mark.parametrize("server", ["reward_url", "search_token_url"])
def test_slow_headers_and_bodies_are_cut_off(server, request):
    url = request.getfixturevalue(server)
    answer = raw_exchange(url, b"POST /get_reward HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    assert answer.startswith(b"HTTP/1.1 408") and b'"field": "headers"' in answer
    assert raw_exchange(url, b"") == b""  # connected, sent nothing: closed
    path = b"/get_reward" if server == "reward_url" else b"/search"
    head = b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n" % path
    answer = raw_exchange(url, head + (AUTH_LINE if "token" in server else b"") + b"\r\n" + b'{"queries"')
    assert answer.startswith(b"HTTP/1.1 408") and b'"field":"body"' in answer.replace(b" ", b"")


AUTH_LINE = f"Authorization: Bearer {TOKEN}\r\n".encode()


# Issue 23 item 4: the 408 for a late body closes the connection; it stayed open, and once the header deadline
# passed the server sent a second, unrequested 408 on it.
@pytest.mark.parametrize("server", ["reward_url", "search_token_url"])
def test_a_late_body_gets_one_408_and_the_connection_closed(server, request):
    url = request.getfixturevalue(server)
    path = b"/get_reward" if server == "reward_url" else b"/search"
    head = b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n" % path
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + (AUTH_LINE if "token" in server else b"") + b"\r\n" + b'{"queries"')
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408") and b"connection: close" in answer.lower()
        # The rest of the body trickles in after the 408: it must not be read as a new request.
        with contextlib.suppress(OSError):
            sock.sendall(b'": ["a"]' + b" " * 82)
        sock.settimeout(3 * FAST_LIMITS.header_timeout_s)
        try:
            rest = sock.recv(65536)
        except TimeoutError:
            rest = b"<still open>"
        except ConnectionResetError:
            rest = b""  # closed: the trickled bytes met a closed socket
    assert rest == b"", rest


def test_oversized_headers_are_refused(reward_url):
    answer = raw_exchange(reward_url, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000)
    assert answer.startswith(b"HTTP/1.1 431")


def test_connections_over_the_limit_get_503():
    app = create_reward_app(ServerSettings(spec=STAGE2_ANSWER))
    with serve(app, **uvicorn_options(Limits(max_concurrency=2))) as url:
        host, port = url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port))) for _ in range(2)]
        try:
            assert httpx.get(f"{url}/health").status_code == 503
        finally:
            for sock in idle:
                sock.close()


# Item 3: what cannot be encoded is refused before batching, and a failing batch is retried request by request.
def test_lone_surrogate_is_refused_before_batching():
    service = SearchService(fixture_backend(), ServerConfig())
    with pytest.raises(RequestError) as caught:
        service.validate(["fine", "bad \ud800"], 3, "queries", "top_k")
    assert caught.value.field == "queries.1"
    with pytest.raises(RequestError) as caught:
        service.validate(["x" * 513], 3, "queries", "top_k")
    assert caught.value.field == "queries.0"


def test_one_bad_query_fails_only_its_own_request():
    backend = fixture_backend()
    good = ["Fort Hood shooting", "Alan Turing", "Eiffel Tower"] * 20

    async def run():
        batcher = MicroBatcher(backend.search, max_batch=128, max_wait_s=0.05)
        batcher.start()
        try:
            calls = [batcher.search([q], 3) for q in good[:30]] + [batcher.search(["bad \ud800"], 3)]
            calls += [batcher.search([q], 3) for q in good[30:]]
            return await asyncio.gather(*calls, return_exceptions=True), batcher.stats()
        finally:
            await batcher.stop()

    results, stats = asyncio.run(run())
    failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert failed == [30]
    expected = backend.search_sync(good, 3)
    served = [r for r in results if not isinstance(r, BaseException)]
    assert [[p.id for p in r[0]] for r in served] == [[p.id for p in e] for e in expected]
    assert stats["retried_alone"] >= 1


# Item 7: a maximum-size request is served in slices beside small ones instead of ahead of them.
def test_a_large_request_does_not_starve_small_ones():
    answered: list[int] = []

    async def search(queries: list[str], top_k: int):
        await asyncio.sleep(0)
        answered.extend(len(q) for q in queries)
        return [[] for _ in queries]

    async def run() -> int:
        batcher = MicroBatcher(search, max_batch=64, max_wait_s=0.001)
        batcher.start()
        try:
            big = asyncio.ensure_future(batcher.search(["x" * 100] * 1024, 100))
            await asyncio.sleep(0)
            await batcher.search(["y"], 3)
            before_small = len(answered)
            await big
            return before_small
        finally:
            await batcher.stop()

    before_small = asyncio.run(run())
    # The old batcher answered all 1,024 big queries first.
    assert before_small <= 2 * 64
    assert len(answered) == 1025


def test_abandoned_large_requests_are_not_finished():
    answered: list[str] = []

    async def search(queries: list[str], top_k: int):
        await asyncio.sleep(0.01)
        answered.extend(queries)
        return [[] for _ in queries]

    async def run() -> None:
        batcher = MicroBatcher(search, max_batch=8, max_wait_s=0)
        batcher.start()
        try:
            big = asyncio.ensure_future(batcher.search(["q"] * 800, 3))
            await asyncio.sleep(0.05)
            big.cancel()
            await asyncio.sleep(0.1)
        finally:
            await batcher.stop()

    asyncio.run(run())
    assert len(answered) < 800


# Item 6: the normalisation cache keeps only short strings, so unique long predictions cannot grow it.
def test_normalize_answer_cache_is_bounded():
    before = metrics._normalize_cached.cache_info().currsize
    for i in range(300):
        assert metrics.normalize_answer(f"The answer {i} " + "word " * 2000).startswith(f"answer {i} word")
    assert metrics._normalize_cached.cache_info().currsize == before
    metrics.normalize_answer("The Eiffel Tower!")
    assert metrics._normalize_cached.cache_info().currsize <= before + 1
    assert metrics._normalize_cached.cache_info().maxsize * metrics._CACHED_CHARS * 4 * 2 < 64 * 1024 * 1024


def test_drop_space_table_covers_every_white_space_character():
    from searchrl.protocols.segments import _DROP_SPACE

    assert set(_DROP_SPACE) == {c for c in range(0x110000) if chr(c).isspace()}


# Item 15: a compressed page is inflated in bounded steps, never past the size cap.
def _compressed(data_chunks, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(packer.compress(chunk) for chunk in data_chunks) + packer.flush()


def pages_with_encodings() -> FastAPI:
    app = FastAPI()
    html = b"<html><head><title>Packed</title></head><body><p>Compressed page text.</p></body></html>"
    bomb = _compressed((bytes(1 << 20) for _ in range(64)), 31)  # 64 MB of zeros in ~64 KB

    def packed(body: bytes, encoding: str) -> Response:
        return Response(body, headers={"content-encoding": encoding, "content-type": "text/html; charset=utf-8"})

    app.get("/bomb")(lambda: packed(bomb, "gzip"))
    app.get("/gzip")(lambda: packed(_compressed([html], 31), "gzip"))
    app.get("/deflate")(lambda: packed(_compressed([html], 15), "deflate"))
    app.get("/raw-deflate")(lambda: packed(_compressed([html], -15), "deflate"))
    app.get("/brotli")(lambda: packed(html, "br"))
    return app


def fetch_with(url: str, policy: FetchPolicy) -> Page:
    async def main() -> Page:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await fetch_page(client, url, policy)

    return asyncio.run(main())


def test_gzip_bomb_is_refused_without_inflating_it():
    policy = FetchPolicy(allow_private=True, timeout_s=20, max_bytes=2_000_000)
    with serve(pages_with_encodings()) as url:
        for path in ("/gzip", "/deflate", "/raw-deflate"):
            page = fetch_with(f"{url}{path}", policy)
            assert (page.title, page.text) == ("Packed", "Compressed page text.")
        with pytest.raises(FetchRefusedError) as unsupported:
            fetch_with(f"{url}/brotli", policy)
        assert unsupported.value.reason == "content encoding not supported"
        tracemalloc.start()
        try:
            with pytest.raises(FetchRefusedError) as refused:
                fetch_with(f"{url}/bomb", policy)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert refused.value.reason == "too large"
    # httpx inflated each network chunk whole: 64 MB here for a 2 MB cap.
    assert peak < 16 * 1024 * 1024


def test_long_queries_come_in_smaller_batches_and_results_are_capped():
    calls: list[list[str]] = []

    async def search(queries: list[str], top_k: int):
        calls.append(queries)
        return [[] for _ in queries]

    async def run() -> None:
        batcher = MicroBatcher(search, max_batch=64, max_wait_s=0, max_batch_chars=4096)
        batcher.start()
        try:
            await asyncio.gather(batcher.search(["x" * 1000] * 40, 3), batcher.search(["y" * 5000], 3))
        finally:
            await batcher.stop()

    asyncio.run(run())
    assert sorted(len(q) for call in calls for q in call) == [1000] * 40 + [5000]
    assert all(sum(map(len, call)) <= 4096 or len(call) == 1 for call in calls)
    service = SearchService(fixture_backend(), ServerConfig(max_results=10_000))
    with pytest.raises(RequestError) as caught:
        service.validate(["q"] * 1024, 100, "queries", "top_k")
    assert caught.value.field == "queries" and "10000" in caught.value.message
    service.validate(["q"] * 1024, 9, "queries", "top_k")


def test_tokens_never_reach_logs_or_answers(reward_token_url, search_token_url, caplog):
    caplog.set_level(logging.DEBUG)
    for url, path in ((reward_token_url, "/get_reward"), (search_token_url, "/search")):
        for headers in ({"Authorization": f"Bearer {TOKEN}-wrong"}, AUTH):
            response = httpx.post(f"{url}{path}", content=b"{bad", headers={**JSON_HEADERS, **headers})
            assert TOKEN not in response.text
        assert TOKEN not in httpx.get(f"{url}/health", headers=AUTH).text
    assert caplog.records and not [r for r in caplog.records if TOKEN in r.getMessage()]


JSON_HEADERS = {"content-type": "application/json"}


def test_evaluation_reads_the_served_manifest_with_the_token(search_token_url):
    from searchrl.search.http_client import served_manifest

    assert served_manifest([search_token_url]) is None
    assert served_manifest([search_token_url], TOKEN)["model"] == "all-MiniLM-L6-v2"
