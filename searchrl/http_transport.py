"""HTTP plumbing shared by every client of the project (reward, retrieval, router, web providers, evaluation):
one pooled aiohttp session per event loop, in-flight work bounded by a semaphore, and one retry helper.

Imports nothing of the project, so it can move to a core package as it is. Why aiohttp and this shape: at
~1,000 requests in flight an httpx pool of 256 connections delivered nothing within minutes (its queue
bookkeeping stalls the event loop, the pool wait counts inside the request timeout, and the server then
closes the connections left idle); aiohttp behind a semaphore delivered every request
(`benchmarks/load.py`, docs/RELIABILITY.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import math
import random
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

T = TypeVar("T")

# A pooled keep-alive connection the server closed just as we reused it fails before any answer; a fresh
# connection fixes that, so these tries sit outside every retry budget.
STALE_CONNECTION_TRIES = 3
# Below uvicorn's default keep-alive (5 s), so our side closes idle connections before the server does.
DEFAULT_KEEPALIVE_S = 4.0


class RetryableError(Exception):
    """A failure another try may fix; `retry_after_s` is the server's own wait when it gave one."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.tries = 1


class NotSentError(RetryableError):
    """No connection opened, so the request never left: nothing was served, and no provider billed it."""


class RequestEncodingError(ValueError):
    """The request body cannot be sent as JSON (NaN, a lone surrogate, a non-JSON type); no retry can fix it."""


class HttpRefusedError(Exception):
    """The server refused the request with a 4xx other than 408 or 429: retrying the same request cannot help."""

    def __init__(self, url: str, status: int, text: str) -> None:
        super().__init__(f"{url}: HTTP {status}: {text[:500]}")
        self.url = url
        self.status = status
        self.text = text


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to keep trying: `retries` more tries and/or until `deadline_s` after the first; None is no bound."""

    retries: int | None = 3
    deadline_s: float | None = None
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    retry_after_max_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Reply:
    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def retry_after_s(self) -> float | None:
        return parse_retry_after(self.headers.get("Retry-After"))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_wait(n: int, policy: RetryPolicy, retry_after_s: float | None) -> float:
    """The pause before try n + 2: exponential with jitter, at least the server's Retry-After (capped).

    Jitter spreads the retries of a thousand requests that failed together (a server restart) so they do not
    come back as one burst; a Retry-After is never shortened, only stretched by up to a tenth.
    """
    base = min(policy.backoff_max_s, policy.backoff_s * 2**n)
    wait = base * random.uniform(0.5, 1.0)
    if retry_after_s is not None:
        wait = min(max(wait, retry_after_s * random.uniform(1.0, 1.1)), policy.retry_after_max_s)
    return wait


async def with_retries(attempt: Callable[[], Awaitable[T]], policy: RetryPolicy | None = None, **options: Any) -> T:
    """Run `attempt` until it returns, raises anything but RetryableError, or the policy is spent; then re-raise
    the last RetryableError, its `tries` set. With a deadline, tries go on until it (the last one at least
    `backoff_s` before it), and a try still running at the deadline is cancelled.

    The policy comes as a RetryPolicy or as its fields by keyword (`retries=2, backoff_s=0.1`)."""
    policy = policy or RetryPolicy(**options)
    start = time.monotonic()
    n = 0
    while True:
        remaining = None if policy.deadline_s is None else policy.deadline_s - (time.monotonic() - start)
        try:
            async with asyncio.timeout(remaining) as budget:
                return await attempt()
        except RetryableError as exc:
            last = exc
        except TimeoutError:
            if not budget.expired():
                raise
            last = RetryableError(f"no answer within the {policy.deadline_s:g} s deadline")
        n += 1
        last.tries = n
        if policy.retries is not None and n > policy.retries:
            raise last
        wait = backoff_wait(n - 1, policy, last.retry_after_s)
        if policy.deadline_s is not None:
            left = policy.deadline_s - (time.monotonic() - start)
            if left <= policy.backoff_s:
                raise last
            # A backoff that would pass the deadline is cut short for one last try before it: giving up a
            # whole backoff early (up to backoff_max_s) would lose a search whose server is back in time.
            wait = min(wait, left - policy.backoff_s)
        await asyncio.sleep(wait)


def encode_json(body: Any) -> bytes:
    """UTF-8 JSON of `body`, or RequestEncodingError naming the first field that cannot be sent."""
    try:
        return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise RequestEncodingError(f"{_unencodable(body)} (the request was not sent)") from exc


def _unencodable(body: Any) -> str:
    """Where in `body` the JSON encoding fails, and why, e.g. `labels[0]: NaN is not valid JSON`."""
    stack: list[tuple[str, Any, int]] = [("body", body, 0)]
    while stack:
        path, value, depth = stack.pop()
        if depth > 500:
            return f"{path}: nested more than 500 levels deep"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{path}: {value} is not valid JSON (NaN and Infinity have no JSON form)"
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"{path}: not valid UTF-8 text ({exc.reason} at position {exc.start})"
        elif isinstance(value, Mapping):
            for key, item in reversed(list(value.items())):
                if not isinstance(key, str | int | float | bool | type(None)):
                    return f"{path}: a key of type {type(key).__name__} is not JSON"
                stack.append((f"{path}.{key}" if path != "body" else str(key), item, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in reversed(list(enumerate(value))))
        elif not isinstance(value, int | float | bool | type(None)):
            return f"{path}: a value of type {type(value).__name__} is not JSON"
    return "body: cannot be encoded as JSON"


def json_object(data: Any) -> dict[str, Any]:
    """A `parse` for call_json: the answer must be a JSON object."""
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    return data


def raise_for_status(reply: Reply) -> None:
    """RetryableError for 408, 429 and 5xx (with the server's Retry-After); HttpRefusedError for other 4xx."""
    if reply.status < 400:
        return
    if reply.status in (408, 429) or reply.status >= 500:
        raise RetryableError(f"{reply.url}: HTTP {reply.status}: {reply.text[:200]}", reply.retry_after_s)
    raise HttpRefusedError(reply.url, reply.status, reply.text)


def _stale(exc: BaseException) -> bool:
    """A kept-alive connection that died under us before an answer (as opposed to a server that is down)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(
        exc, aiohttp.ServerDisconnectedError | aiohttp.ClientConnectionResetError | aiohttp.ClientOSError
    )


def _proxies_configured() -> bool:
    # aiohttp's trust_env re-reads the proxy environment on every request (0.7 ms each, measured here: most
    # of a core at 1,000 req/s); with no proxy variable set there is nothing to honour, so it stays off.
    return any(scheme != "no" for scheme in urllib.request.getproxies_environment())


class HttpSession:
    """A pooled aiohttp session with at most `max_in_flight` requests at once.

    Callers past the bound wait on a semaphore *before* their request starts, so `timeout_s` measures the
    server's answer only, never the queue: a thousand callers on 256 slots wait their turn instead of timing
    out in a pool. The aiohttp session is made on first use inside the running event loop (one per loop),
    because a session cannot outlive the loop it was made in.
    """

    def __init__(
        self,
        *,
        timeout_s: float,
        max_in_flight: int = 256,
        headers: Mapping[str, str] | None = None,
        keepalive_s: float = DEFAULT_KEEPALIVE_S,
        trust_env: bool = True,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight: must be at least 1, got {max_in_flight}")
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.headers = dict(headers or {})
        self.keepalive_s = keepalive_s
        self.trust_env = trust_env
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None

    def __repr__(self) -> str:
        # Headers stay out: they may carry a bearer token.
        return f"HttpSession(timeout_s={self.timeout_s}, max_in_flight={self.max_in_flight})"

    def _state(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._slots is None or self._loop is not loop:
            self._forget()
            # The connector may hold exactly as many connections as the semaphore lets requests run, so a
            # request that holds a slot never waits for a connection.
            connector = aiohttp.TCPConnector(
                limit=self.max_in_flight, limit_per_host=0, keepalive_timeout=self.keepalive_s
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self.headers,
                trust_env=self.trust_env and _proxies_configured(),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            )
            self._slots = asyncio.Semaphore(self.max_in_flight)
            self._loop = loop
        return self._session, self._slots

    def _forget(self) -> None:
        """Drop a session made in an event loop that is gone (asyncio.run called again); it cannot be awaited."""
        if self._session is not None and not self._session.closed:
            connector = self._session.connector
            self._session.detach()
            # The public close() needs the dead loop; the synchronous part marks the pool closed so it is
            # not reported as leaked (its sockets go with the loop's transports).
            with contextlib.suppress(Exception):
                connector._close()  # type: ignore[union-attr]
        self._session = self._slots = self._loop = None

    async def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """One request, answered with any status; RetryableError for timeouts and connection trouble."""
        session, slots = self._state()
        if body is not None:
            headers = {"Content-Type": "application/json", **(headers or {})}
        async with slots:
            for stale_try in range(1, STALE_CONNECTION_TRIES + 1):
                try:
                    async with session.request(method, url, data=body, params=params, headers=headers) as response:
                        return Reply(url, response.status, response.headers, await response.read())
                except TimeoutError:
                    raise RetryableError(f"{url}: no answer within {self.timeout_s:g} s") from None
                except aiohttp.ClientError as exc:
                    if _stale(exc) and stale_try < STALE_CONNECTION_TRIES:
                        continue
                    if isinstance(exc, aiohttp.ClientConnectorError):
                        raise NotSentError(f"{url}: cannot connect ({exc.os_error})") from None
                    raise RetryableError(f"{url}: {type(exc).__name__}: {exc}") from None
        raise AssertionError("unreachable")

    async def call_json(
        self,
        method: str,
        url: str | Callable[[], str],
        body: Any = None,
        *,
        parse: Callable[[Any], T],
        retry: RetryPolicy,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> T:
        """Send `body` as JSON, retrying under `retry`, and return `parse(answer)`.

        A body that cannot be encoded raises RequestEncodingError before anything is sent; a 4xx raises
        HttpRefusedError at once; an answer that is not JSON or that `parse` rejects (ValueError, KeyError,
        IndexError, TypeError) is retried like a 5xx. `url` may be a callable, asked again on every try
        (round robin over replicas)."""
        data = None if body is None else encode_json(body)

        async def attempt() -> T:
            target = url() if callable(url) else url
            reply = await self.send(method, target, body=data, params=params, headers=headers)
            raise_for_status(reply)
            try:
                return parse(reply.json())
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise RetryableError(f"{target}: malformed answer ({type(exc).__name__}: {exc})") from None

        return await with_retries(attempt, retry)

    async def aclose(self) -> None:
        if self._session is not None and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._forget()
