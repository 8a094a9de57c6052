"""The one server guard of the reward and retrieval servers: bearer token, content type, body size and
deadline, strict JSON, and one error body (`{"detail": "<field>: <message>", "field": "<field>"}`).

A hostile or broken client must cost the server bounded time and memory: the bearer token and the
content type are checked from the headers alone, the body is read under a size cap and a deadline,
headers must arrive within a deadline too (slow senders), and JSON is parsed strictly.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import hmac
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import jiter
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, SecretStr, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

AUTHORIZED = "searchrl.authorized"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_DUPLICATE = re.compile(r'Detected duplicate key "(.*)" at line')


@dataclass(frozen=True)
class Limits:
    """What one connection and one request may cost; the defaults suit a server on loopback or a cluster network."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_header_bytes: int = 64 * 1024
    keep_alive_s: float = 5.0
    # Above this many open connections (or requests in flight) uvicorn answers 503 at once instead of
    # running out of file descriptors; training keeps about a thousand requests in flight.
    max_concurrency: int = 4096


def token_matches(headers: Iterable[tuple[bytes, bytes]], token: str) -> bool:
    sent = next((value for name, value in headers if name == b"authorization"), b"")
    return hmac.compare_digest(sent, f"Bearer {token}".encode())


def is_authorized(scope: Scope) -> bool:
    """Whether RequestGuard found the bearer token (always true when the server has none)."""
    return bool(scope.get(AUTHORIZED, False))


def secret_value(token: SecretStr | str | None) -> str | None:
    """The token's text, or None when auth is off (an empty token also turns it off)."""
    if isinstance(token, SecretStr):
        token = token.get_secret_value()
    return token or None


def server_token(explicit: SecretStr | str | None, env: str) -> str | None:
    """The bearer token a server requires: the one given, else the env variable's; an explicit empty token
    turns auth off even when the variable is set."""
    return secret_value(explicit) if explicit is not None else secret_value(os.environ.get(env))


class RequestGuard:
    """Everything checked before the app sees a request, in this order:

    1. the bearer token, from the headers, so an unauthenticated client never gets its body read
       (`open_paths` answer without it; the app sees `is_authorized(scope)` and shows only a liveness answer);
    2. `Content-Type: application/json` on requests with a body, so a web page cannot post a form or
       text/plain body cross-site without a CORS preflight;
    3. the body: 413 over `max_bytes` (declared or streamed), 408 when it takes over `body_timeout_s`.
    The body is handed to the app as one message.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        token: SecretStr | str | None = None,
        open_paths: Iterable[str] = ("/health",),
        body_timeout_s: float = 30.0,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.token = secret_value(token)
        self.open_paths = frozenset(open_paths)
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        authorized = self.token is None or token_matches(headers, self.token)
        scope[AUTHORIZED] = authorized
        if not authorized and scope["path"] not in self.open_paths:
            await _reply(send, 401, "Authorization", "missing or wrong bearer token (Authorization: Bearer <token>)")
            return
        if scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        content_type = next((value for name, value in headers if name == b"content-type"), b"")
        if content_type.split(b";", 1)[0].strip().lower() != b"application/json":
            shown = content_type.decode("latin-1")[:100] or "none"
            await _reply(send, 415, "content-type", f"must be application/json, got {shown}")
            return
        declared = next((value for name, value in headers if name == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send, int(declared))
            return
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await self._read_body(receive, send)
        except TimeoutError:
            await _reply(send, 408, "body", f"not received within {self.body_timeout_s:g}s")
            return
        if body is None:
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None when it was refused (413, answered here) or the client went away."""
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                await self._too_large(send, received)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _too_large(self, send: Send, size: int) -> None:
        await _reply(send, 413, "body", f"{size} bytes is over the {self.max_bytes}-byte limit")


def error_response(status: int, field: str, message: str) -> JSONResponse:
    """The one error body of both servers: the field at fault and what is wrong with it."""
    return JSONResponse(status_code=status, content={"detail": f"{field}: {message}", "field": field})


async def _reply(send: Send, status: int, field: str, message: str) -> None:
    await error_response(status, field, message)({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


class RequestError(ValueError):
    """A request the server refuses (not strict JSON, a wrong type, inconsistent values); answered with 422
    naming the field (`body` when no field applies)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_json(body: bytes) -> Any:
    """Strict JSON: no NaN/Infinity literals, no key twice in one object, valid UTF-8, nesting under 200 levels.

    Python's json module accepts all four; a server that takes the last of two `query` keys, or a NaN
    count, answers something its client did not mean to ask.
    """
    try:
        return jiter.from_json(body, allow_inf_nan=False, catch_duplicate_keys=True, cache_mode="keys")
    except ValueError as e:
        text = str(e)
        if (duplicate := _DUPLICATE.match(text)) is not None:
            raise RequestError(duplicate.group(1), "appears twice in one object; send each key once") from None
        raise RequestError("body", f"not valid JSON: {text}") from None


Body = TypeVar("Body", bound=BaseModel)


def parse_body(body: bytes, model: type[Body]) -> Body:
    """The body as `model`: strict JSON, then pydantic validation; RequestError naming the first bad field."""
    try:
        return model.model_validate(parse_json(body))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        raise RequestError(".".join(str(p) for p in first["loc"]) or "body", first["msg"]) from None


def guard(app: FastAPI, *, max_bytes: int, token: str | None, body_timeout_s: float) -> None:
    """Put the RequestGuard in front of `app` and answer every RequestError with 422 and the error body."""
    app.add_middleware(RequestGuard, max_bytes=max_bytes, token=token, body_timeout_s=body_timeout_s)

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError) -> JSONResponse:
        return error_response(422, exc.field, exc.message)


_MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)


def release_freed_memory() -> None:
    """Hand memory freed after large work back to the operating system (glibc's malloc_trim; a no-op elsewhere).

    glibc keeps freed blocks in per-thread arenas, so after a large request (encoder batches, a big
    body parsed in a thread) a server's resident size would stay at that request's peak.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class SlowSenderProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size cap on request headers.

    uvicorn waits for headers without limit: a client sending one byte every few seconds holds a
    connection (and a file descriptor) for ever. Here the headers of each request must arrive within
    `limits.header_timeout_s` of the connection opening or the previous response, in at most
    `limits.max_header_bytes`; otherwise the connection gets a 408 or 431 and is closed.
    """

    def __init__(self, *args: Any, limits: Limits | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits or Limits()
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        awaiting = self._header_timer is not None
        super().data_received(data)
        # Counted only while the headers are still incomplete after this data: a body arriving in the
        # same read as the headers is not header bytes.
        if awaiting and self._header_timer is not None:
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._refuse(431, "headers", f"over {self.limits.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined request already parsed is running; otherwise the next request's headers are due.
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._await_headers()

    def _await_headers(self) -> None:
        self._stop_header_timer()
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._header_bytes:
            self._refuse(408, "headers", f"not received within {self.limits.header_timeout_s:g}s")
        elif not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, field: str, message: str) -> None:
        self._stop_header_timer()
        if self.transport.is_closing():
            return
        reason = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}[status]
        body = b'{"detail": "%s: %s", "field": "%s"}' % (field.encode(), message.encode(), field.encode())
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, reason, len(body), body)
        )
        self.transport.close()


def uvicorn_options(limits: Limits) -> dict[str, Any]:
    """Keyword arguments for uvicorn.run / uvicorn.Config that apply `limits` at the connection level.

    The protocol is a partial of a module-level class, so it pickles into `--workers` processes.
    """
    return {
        "http": functools.partial(SlowSenderProtocol, limits=limits),
        "limit_concurrency": limits.max_concurrency,
        "timeout_keep_alive": limits.keep_alive_s,
    }
