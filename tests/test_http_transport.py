"""The HTTP plumbing every client shares, against real loopback servers: stale keep-alive connections,
the queue kept out of the request timeout, Retry-After with jitter, deadlines, bodies that cannot be sent."""

import asyncio
import math
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from searchrl.http_transport import (
    HttpSession,
    NotSentError,
    RequestEncodingError,
    RetryableError,
    RetryPolicy,
    backoff_wait,
    encode_json,
    json_object,
    with_retries,
)
from searchrl.process import free_port
from searchrl.rollout.reward_client import RewardClient, RewardRequestError
from searchrl.search.base import SearchAuthError, SearchError
from searchrl.search.http_client import HttpSearchBackend
from tests.conftest import serve


async def _read_request(reader: asyncio.StreamReader) -> bool:
    """Read one HTTP/1.1 request with a Content-Length body; False when the peer closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    await reader.readexactly(length)
    return True


class DroppingServer:
    """Answers the first request on each connection and keeps it alive, then closes the connection when
    the second request arrives, unanswered: what a client sees when it reuses a pooled connection at the
    moment the server's keep-alive timer closes it."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.dropped = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        while await _read_request(reader):
            self.requests += 1
            if answered == 1:
                self.dropped += 1
                break
            body = b'{"ok": true}'
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            await writer.drain()
            answered += 1
        writer.close()


def test_a_stale_pooled_connection_is_retried_on_a_fresh_one_outside_the_retry_budget():
    server = DroppingServer()

    async def run():
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/x"
        http = HttpSession(timeout_s=5, keepalive_s=60)
        try:
            no_retries = RetryPolicy(retries=0)
            return [await http.call_json("POST", url, {"i": i}, parse=json_object, retry=no_retries) for i in range(4)]
        finally:
            await http.aclose()
            listener.close()

    assert asyncio.run(run()) == [{"ok": True}] * 4
    # Every request after the first met a dropped connection and went again on a new one.
    assert server.dropped == 3 and server.requests == 7 and server.connections == 4


def _slow_app(delay_s: float, seen: dict) -> FastAPI:
    app = FastAPI()

    @app.post("/slow")
    async def slow(request: Request) -> JSONResponse:
        seen["now"] += 1
        seen["peak"] = max(seen["peak"], seen["now"])
        await asyncio.sleep(delay_s)
        seen["now"] -= 1
        return JSONResponse(await request.json())

    return app


def test_waiting_for_a_slot_does_not_count_against_the_request_timeout():
    # 30 requests, one slot, 0.1 s each: the last waits ~3 s, past its 1.5 s timeout, and must still succeed.
    seen = {"now": 0, "peak": 0}
    with serve(_slow_app(0.1, seen)) as url:

        async def run():
            http = HttpSession(timeout_s=1.5, max_in_flight=1)
            policy = RetryPolicy(retries=0)
            try:
                return await asyncio.gather(
                    *(
                        http.call_json("POST", f"{url}/slow", {"i": i}, parse=json_object, retry=policy)
                        for i in range(30)
                    )
                )
            finally:
                await http.aclose()

        answers = asyncio.run(run())
    assert answers == [{"i": i} for i in range(30)]
    assert seen["peak"] == 1


def test_retry_after_is_honoured_never_shortened_and_capped():
    policy = RetryPolicy(backoff_s=0.5, backoff_max_s=8.0, retry_after_max_s=60.0)
    waits = [backoff_wait(0, policy, 2.0) for _ in range(200)]
    assert all(2.0 <= w <= 2.2 for w in waits) and len(set(waits)) > 100  # jittered, never early
    assert backoff_wait(0, policy, 3600.0) == 60.0
    plain = [backoff_wait(3, policy, None) for _ in range(200)]
    assert all(2.0 <= w <= 4.0 for w in plain) and len(set(plain)) > 100


def test_429_with_retry_after_then_success():
    calls: list[float] = []
    app = FastAPI()

    @app.post("/busy")
    async def busy() -> JSONResponse:
        calls.append(time.monotonic())
        if len(calls) == 1:
            return JSONResponse(status_code=429, content={"detail": "busy"}, headers={"Retry-After": "1"})
        return JSONResponse({"ok": True})

    with serve(app) as url:

        async def run():
            http = HttpSession(timeout_s=5)
            try:
                return await http.call_json("POST", f"{url}/busy", {}, parse=json_object, retry=RetryPolicy(retries=1))
            finally:
                await http.aclose()

        assert asyncio.run(run()) == {"ok": True}
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.95


def test_a_deadline_cuts_a_hanging_request_short():
    # The server reads the request and never answers; the 1 s deadline must end the wait long before the
    # 30 s request timeout would.
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(3600)

    async def run():
        listener = await asyncio.start_server(silent, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/x"
        http = HttpSession(timeout_s=30)
        t0 = time.monotonic()
        try:
            with pytest.raises(RetryableError, match="deadline"):
                await http.call_json(
                    "POST", url, {}, parse=json_object, retry=RetryPolicy(retries=None, deadline_s=1.0)
                )
            return time.monotonic() - t0
        finally:
            await http.aclose()
            listener.close()

    assert asyncio.run(run()) < 30


def test_a_deadline_gets_a_last_try_instead_of_giving_up_a_backoff_early():
    """The server says Retry-After 0.7 s and is back 1.6 s after the first try; the deadline is 2 s. The next
    wait after the third try would pass the deadline: before, the call gave up there (at ~1.5 s), though the
    server was back in time; now the wait is cut short for a last try before the deadline."""

    async def run():
        t0 = time.monotonic()

        async def attempt():
            if time.monotonic() - t0 < 1.6:
                raise RetryableError("down", retry_after_s=0.7)
            return "up"

        policy = RetryPolicy(retries=None, deadline_s=2.0, backoff_s=0.2, backoff_max_s=5.0)
        return await with_retries(attempt, policy), time.monotonic() - t0

    answer, elapsed = asyncio.run(run())
    assert answer == "up" and elapsed < 2.0


def test_with_retries_counts_tries_and_reraises_the_last():
    tries = []

    async def attempt():
        tries.append(1)
        raise RetryableError(f"try {len(tries)}")

    with pytest.raises(RetryableError, match="try 3") as caught:
        asyncio.run(with_retries(attempt, retries=2, backoff_s=0.001))
    assert caught.value.tries == 3


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"labels": [math.nan]}, "labels[0]: nan"),
        ({"metadata": [{"num_searches": math.inf}]}, "metadata[0].num_searches: inf"),
        ({"queries": ["fine", "bad \ud800 text"]}, "queries[1]: not valid UTF-8"),
        ({"labels": [object()]}, "labels[0]: a value of type object"),
    ],
)
def test_a_body_that_cannot_be_sent_names_its_field(body, where):
    with pytest.raises(RequestEncodingError, match=where.replace("[", r"\[").replace("]", r"\]")):
        encode_json(body)


def test_deep_nesting_is_a_client_side_error():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(RequestEncodingError, match="nested more than 500 levels"):
        encode_json({"labels": [deep]})


def _counting_app(status: int = 200) -> tuple[FastAPI, list]:
    app = FastAPI()
    calls: list = []

    @app.post("/get_reward")
    @app.post("/search")
    async def anything() -> JSONResponse:
        calls.append(1)
        return JSONResponse(status_code=status, content={"detail": "no", "field": "Authorization"})

    return app, calls


def test_reward_client_fails_at_once_on_a_nan_label_without_blaming_the_server():
    app, calls = _counting_app()
    with serve(app) as url:

        async def run():
            client = RewardClient(url, deadline_s=300)
            t0 = time.monotonic()
            try:
                with pytest.raises(RewardRequestError, match=r"labels\[0\]: nan is not valid JSON") as caught:
                    await client.score("x </think><answer> a </answer>", "", math.nan)
                return time.monotonic() - t0, str(caught.value)
            finally:
                await client.aclose()

        elapsed, message = asyncio.run(run())
    assert calls == [] and "server" not in message and elapsed < 5


def test_search_with_an_unencodable_query_is_a_search_error_not_a_unicode_error():
    app, calls = _counting_app()
    with serve(app) as url:

        async def run():
            async with HttpSearchBackend(url, retries=3) as client:
                await client.search(["fine", "broken \ud800"], 3)

        with pytest.raises(SearchError, match=r"queries\[1\]: not valid UTF-8"):
            asyncio.run(run())
    assert calls == []


@pytest.mark.parametrize("status", [401, 403])
def test_search_auth_refusal_is_a_search_auth_error_not_retried(status):
    app, calls = _counting_app(status)
    with serve(app) as url:

        async def run():
            async with HttpSearchBackend(url, retries=3, backoff_s=0.01) as client:
                await client.search(["q"], 3)

        with pytest.raises(SearchAuthError, match=f"HTTP {status}"):
            asyncio.run(run())
    assert len(calls) == 1


def test_one_client_serves_several_event_loops():
    app, calls = _counting_app(404)
    with serve(app) as url:
        client = HttpSearchBackend(url, retries=0)
        for _ in range(2):  # each asyncio.run is a new loop; a session bound to the old one would fail
            with pytest.raises(SearchError, match="HTTP 404"):
                asyncio.run(client.search(["q"], 1))
        asyncio.run(client.aclose())
    assert len(calls) == 2


def test_unreachable_server_message_names_the_url():
    port = free_port()

    async def run():
        http = HttpSession(timeout_s=2)
        try:
            await http.send("POST", f"http://127.0.0.1:{port}/x", body=b"{}")
        finally:
            await http.aclose()

    # Its own type, which the web backend's budget reads: a request that never left is not billed.
    with pytest.raises(NotSentError, match=f"127.0.0.1:{port}/x: cannot connect"):
        asyncio.run(run())
