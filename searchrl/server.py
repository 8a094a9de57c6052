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
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import jiter
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, BeforeValidator, Field, SecretStr, StrictInt, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from searchrl.host_check import allowed_host

AUTHORIZED = "searchrl.authorized"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_DUPLICATE = re.compile(r'Detected duplicate key "(.*)" at line')
MAX_FIELD_DEPTH = 8
_POSITION = re.compile(r"at line (\d+) column (\d+)$")
# A JSON string (closed or cut off where the scan stops), a structural character, or a run of anything else.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*("?)|[{}\[\],:]|[^"{}\[\],:]+', re.S)


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

    1. without a token, the `Host` header (searchrl/host_check.py): 403 for a name that is neither loopback,
       an IP address nor in `allowed_hosts`, so a page in a browser cannot reach us by DNS rebinding;
    2. the bearer token, from the headers, so an unauthenticated client never gets its body read
       (`open_paths` answer without it; the app sees `is_authorized(scope)` and shows only a liveness answer);
    3. `Content-Type: application/json` on requests with a body, so a web page cannot post a form or
       text/plain body cross-site without a CORS preflight;
    4. the body: 413 over `max_bytes` (declared or streamed), 408 when it takes over `body_timeout_s`; both
       close the connection, whose unread rest would otherwise be taken for the next request.
    Steps 3 and 4 apply only to the routes that take a body (`routes`, the app's router): a PUT to /health
    gets the app's 405. The body is handed to the app as one message.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        token: SecretStr | str | None = None,
        open_paths: Iterable[str] = ("/health",),
        body_timeout_s: float = 30.0,
        allowed_hosts: Iterable[str] = (),
        routes: Any = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.token = secret_value(token)
        self.open_paths = frozenset(open_paths)
        self.body_timeout_s = body_timeout_s
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.routes = routes
        self._body_routes: frozenset[tuple[str, str]] | None = None

    def _takes_body(self, method: str, path: str) -> bool:
        if self.routes is None:
            return True
        if self._body_routes is None:
            # Read on first use: routes are declared after the middleware is added.
            self._body_routes = frozenset(
                (m, route.path)
                for route in self.routes.routes
                for m in getattr(route, "methods", None) or ()
                if m in _BODY_METHODS
            )
        return (method, path) in self._body_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        if self.token is None:
            host = next((value for name, value in headers if name == b"host"), None)
            if not allowed_host(host, self.allowed_hosts):
                shown = (host or b"").decode("latin-1")[:100]
                message = f"{shown} is not an allowed host; without a token only loopback names and IP addresses are"
                await _reply(send, 403, "Host", f"{message} (allow a name with --allowed-hosts, or set a token)")
                return
        authorized = self.token is None or token_matches(headers, self.token)
        scope[AUTHORIZED] = authorized
        if not authorized and scope["path"] not in self.open_paths:
            await _reply(send, 401, "Authorization", "missing or wrong bearer token (Authorization: Bearer <token>)")
            return
        if scope["method"] not in _BODY_METHODS or not self._takes_body(scope["method"], scope["path"]):
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
            await _reply(send, 408, "body", f"not received within {self.body_timeout_s:g}s", close=True)
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
        await _reply(send, 413, "body", f"{size} bytes is over the {self.max_bytes}-byte limit", close=True)


class ErrorBody(BaseModel):
    """Every 4xx of both servers."""

    detail: str = Field(description="`<field>: <what is wrong and how to fix it>`")
    field: str = Field(description="the request field at fault (`body`, a header name, or a dotted path)")


_ERRORS = {
    401: "missing or wrong bearer token (only when the server has one)",
    403: "without a token: a Host header that is not a loopback name or an IP address (DNS rebinding)",
    408: "the body did not arrive within the deadline (the connection is closed)",
    413: "the body is over the size limit (the connection is closed)",
    415: "the body is not `Content-Type: application/json`",
    422: "not strict JSON, a field of the wrong type or value, or lists that disagree; `field` names it",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the errors a route can answer, all with the ErrorBody."""
    return {status: {"model": ErrorBody, "description": _ERRORS[status]} for status in statuses}


BODY_ERRORS = error_responses(401, 403, 408, 413, 415, 422)


def error_response(status: int, field: str, message: str, close: bool = False) -> JSONResponse:
    """The one error body of both servers: the field at fault and what is wrong with it."""
    headers = {"Connection": "close"} if close else None
    return JSONResponse(status_code=status, content={"detail": f"{field}: {message}", "field": field}, headers=headers)


async def _reply(send: Send, status: int, field: str, message: str, close: bool = False) -> None:
    await error_response(status, field, message, close)({"type": "http"}, _no_receive, send)


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
        # A body cut short is the body's fault, not the last field's.
        where = None if text.startswith("EOF") else _POSITION.search(text)
        field = "body" if where is None else field_at(body, int(where.group(1)), int(where.group(2)))
        raise RequestError(field, f"not valid JSON: {text}") from None


def _key_text(token: bytes) -> str:
    try:
        return str(json.loads(token))
    except ValueError:
        return token[1:-1].decode("utf-8", errors="replace")


def shown(value: Any) -> str:
    """A value as an error message may echo it: short. Python prints integers of up to 4,300 digits."""
    if type(value) is int:
        return str(value) if abs(value) < 10**15 else "a number too large"
    return repr(value)[:40] if isinstance(value, str | float) else f"a {type(value).__name__}"


def field_at(body: bytes, line: int, column: int) -> str:
    """The dotted path (`metadata.0.num_searches`) of the value at `line`:`column` (1-based, in bytes, as
    jiter reports an error), `body` at the top level: so a NaN or a lone surrogate names its field."""
    start = 0
    for _ in range(line - 1):
        start = body.find(b"\n", start) + 1
        if start == 0:
            return "body"
    stack: list[list[Any]] = []  # [is_object, key or index, expecting a key]
    for match in _TOKEN.finditer(body, 0, start + column - 1):
        token = match.group()
        first = token[:1]
        if first == b'"':
            if stack and stack[-1][0] and stack[-1][2]:
                if not match.group(1):
                    break  # the error is inside this key
                stack[-1][1] = _key_text(token)
                stack[-1][2] = False
        elif first == b"{":
            stack.append([True, None, True])
        elif first == b"[":
            stack.append([False, 0, False])
        elif first in (b"}", b"]"):
            if stack:
                stack.pop()
        elif first == b"," and stack:
            if stack[-1][0]:
                stack[-1][1:] = [None, True]
            else:
                stack[-1][1] += 1
    path = [str(frame[1]) for frame in stack if frame[1] is not None]
    # A body nested hundreds deep (refused as such) is named by where the nesting starts.
    return ".".join(path[:MAX_FIELD_DEPTH]) or "body"


def _whole(value: Any) -> Any:
    return int(value) if type(value) is float and value.is_integer() else value


# An integer field that also takes 3.0: JSON Schema's "integer" (what the OpenAPI schemas publish) includes it.
# Strings and booleans stay refused.
WholeNumber = Annotated[StrictInt, BeforeValidator(_whole)]

Body = TypeVar("Body", bound=BaseModel)


def parse_body(body: bytes, model: type[Body]) -> Body:
    """The body as `model`: strict JSON, then pydantic validation; RequestError naming the first bad field."""
    try:
        return model.model_validate(parse_json(body))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        raise RequestError(".".join(str(p) for p in first["loc"]) or "body", first["msg"]) from None


def guard(
    app: FastAPI, *, max_bytes: int, token: str | None, body_timeout_s: float, allowed_hosts: Iterable[str] = ()
) -> None:
    """Put the RequestGuard in front of `app` and answer every RequestError with 422 and the error body."""
    app.add_middleware(
        RequestGuard,
        max_bytes=max_bytes,
        token=token,
        body_timeout_s=body_timeout_s,
        allowed_hosts=allowed_hosts,
        routes=app.router,
    )

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError) -> JSONResponse:
        return error_response(422, exc.field, exc.message)

    # The framework's own 404 and 405 get the one error body too, so every 4xx names what is wrong.
    @app.exception_handler(StarletteHTTPException)
    async def _not_routed(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            field, message = "path", f"{request.url.path} is not an endpoint of this server (see /docs)"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            field, message = "method", f"{request.method} is not allowed on {request.url.path}; use {allowed}"
        else:
            field, message = "request", str(exc.detail)
        response = error_response(exc.status_code, field, message)
        response.headers.update(exc.headers or {})
        return response


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
