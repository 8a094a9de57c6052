"""Loopback fakes of the web search APIs, an OpenAI-compatible chat endpoint and a page server.

Each provider app answers that provider's documented JSON from canned documents. A FakeControl counts calls,
records requests, and plays failure modes in order: "429" (with Retry-After), "500", "slow", "malformed"
(truncated JSON), "wrong_shape" (valid JSON without the documented fields), "401"; then `mode` for the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse


@dataclass(frozen=True)
class Doc:
    title: str
    url: str
    text: str
    score: float
    raw_content: str | None = None


CANNED = [
    Doc(
        "Alan Turing",
        "https://en.wikipedia.org/wiki/Alan_Turing",
        "Alan Turing was an English mathematician and computer scientist.",
        0.91,
    ),
    Doc(
        "Turing machine",
        "https://en.wikipedia.org/wiki/Turing_machine",
        "A Turing machine is a mathematical model of computation.",
        0.85,
    ),
    Doc(
        "Enigma machine",
        "https://en.wikipedia.org/wiki/Enigma_machine",
        "The Enigma machine is a cipher device used in the early- to mid-20th century.",
        0.62,
    ),
    Doc(
        "Turing biography",
        "https://www.britannica.com/biography/Alan-Turing",
        "British mathematician and logician who made major contributions to computing.",
        0.55,
    ),
    Doc(
        "Bletchley Park",
        "https://en.wikipedia.org/wiki/Bletchley_Park",
        "Bletchley Park was the principal centre of Allied code-breaking.",
        0.40,
    ),
]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    params: dict[str, str]
    json: Any


@dataclass
class FakeControl:
    docs: list[Doc] = field(default_factory=lambda: list(CANNED))
    api_key: str | None = "test-key"
    script: list[str] = field(default_factory=list)
    mode: str = "ok"
    retry_after: str | None = "1"
    slow_s: float = 3.0
    calls: int = 0
    requests: list[Recorded] = field(default_factory=list)
    call_times: list[float] = field(default_factory=list)

    def next_mode(self) -> str:
        return self.script.pop(0) if self.script else self.mode


async def _gate(
    control: FakeControl, request: Request, key_ok: Callable[[Request, Any], bool]
) -> tuple[Response | None, Any]:
    body: Any = None
    if request.method == "POST":
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(status_code=400, content={"error": "body is not JSON"}), None
    control.calls += 1
    control.call_times.append(time.monotonic())
    control.requests.append(
        Recorded(request.method, request.url.path, dict(request.headers), dict(request.query_params), body)
    )
    mode = control.next_mode()
    if mode == "401" or (control.api_key is not None and not key_ok(request, body)):
        return JSONResponse(status_code=401, content={"message": "Unauthorized."}), body
    if mode == "429":
        headers = {"Retry-After": control.retry_after} if control.retry_after is not None else {}
        return JSONResponse(status_code=429, content={"message": "Too many requests"}, headers=headers), body
    if mode == "500":
        return JSONResponse(status_code=500, content={"message": "internal error"}), body
    if mode == "slow":
        await asyncio.sleep(control.slow_s)
    if mode == "malformed":
        return Response('{"results": [{"title": "Alan', media_type="application/json"), body
    if mode == "wrong_shape":
        return JSONResponse({"unexpected": [1, 2, 3]}), body
    return None, body


def _domain_filter(docs: list[Doc], query: str, domains: list[str] | None) -> tuple[str, list[Doc]]:
    """Honour `site:` in the query or a domain list the way the real engines do."""
    words = query.split()
    sites = [w[5:] for w in words if w.startswith("site:")] + list(domains or [])
    plain = " ".join(w for w in words if not w.startswith("site:"))
    if sites:
        docs = [d for d in docs if any((urlsplit(d.url).hostname or "").endswith(s) for s in sites)]
    return plain, docs


def serper_app(control: FakeControl) -> FastAPI:
    app = FastAPI()

    @app.post("/search")
    async def search(request: Request) -> Response:
        refusal, body = await _gate(control, request, lambda r, b: r.headers.get("x-api-key") == control.api_key)
        if refusal:
            return refusal
        num = int(body.get("num", 10))
        _, docs = _domain_filter(control.docs, body["q"], None)
        organic = [
            {"title": d.title, "link": d.url, "snippet": d.text, "position": i + 1} for i, d in enumerate(docs[:num])
        ]
        return JSONResponse(
            {
                "searchParameters": {"q": body["q"], "type": "search", "num": num, "engine": "google"},
                "organic": organic,
                "credits": 1,
            }
        )

    return app


def brave_app(control: FakeControl) -> FastAPI:
    app = FastAPI()

    @app.get("/res/v1/web/search")
    async def search(request: Request) -> Response:
        refusal, _ = await _gate(
            control, request, lambda r, b: r.headers.get("x-subscription-token") == control.api_key
        )
        if refusal:
            return refusal
        q = request.query_params["q"]
        count = int(request.query_params.get("count", 20))
        _, docs = _domain_filter(control.docs, q, None)
        results = [
            {
                "type": "search_result",
                "title": d.title,
                "url": d.url,
                "description": d.text.replace("Turing", "<strong>Turing</strong>"),
            }
            for d in docs[:count]
        ]
        answer: dict[str, Any] = {"type": "search", "query": {"original": q}}
        if results:
            answer["web"] = {"type": "search", "results": results}
        return JSONResponse(answer)

    return app


def tavily_app(control: FakeControl) -> FastAPI:
    app = FastAPI()

    def key_ok(request: Request, body: Any) -> bool:
        return request.headers.get("authorization") == f"Bearer {control.api_key}" or (
            isinstance(body, dict) and body.get("api_key") == control.api_key
        )

    @app.post("/search")
    async def search(request: Request) -> Response:
        refusal, body = await _gate(control, request, key_ok)
        if refusal:
            return refusal
        _, docs = _domain_filter(control.docs, body["query"], body.get("include_domains"))
        raw = bool(body.get("include_raw_content"))
        results = [
            {
                "title": d.title,
                "url": d.url,
                "content": d.text,
                "score": d.score,
                "raw_content": d.raw_content if raw else None,
            }
            for d in docs[: int(body.get("max_results", 5))]
        ]
        return JSONResponse(
            {"query": body["query"], "answer": None, "images": [], "results": results, "response_time": 0.01}
        )

    return app


def searxng_app(control: FakeControl) -> FastAPI:
    app = FastAPI()
    control.api_key = None

    @app.get("/search")
    async def search(request: Request) -> Response:
        refusal, _ = await _gate(control, request, lambda r, b: True)
        if refusal:
            return refusal
        if request.query_params.get("format") != "json":
            return PlainTextResponse("Forbidden", status_code=403)
        q = request.query_params["q"]
        _, docs = _domain_filter(control.docs, q, None)
        results = [
            {
                "title": d.title,
                "url": d.url,
                "content": d.text,
                "score": d.score * 3,
                "engine": "fake",
                "engines": ["fake"],
                "category": "general",
            }
            for d in docs
        ]
        return JSONResponse(
            {
                "query": q,
                "number_of_results": len(results),
                "results": results,
                "answers": [],
                "suggestions": [],
                "unresponsive_engines": [],
            }
        )

    return app


def exa_app(control: FakeControl) -> FastAPI:
    app = FastAPI()

    @app.post("/search")
    async def search(request: Request) -> Response:
        refusal, body = await _gate(control, request, lambda r, b: r.headers.get("x-api-key") == control.api_key)
        if refusal:
            return refusal
        _, docs = _domain_filter(control.docs, body["query"], body.get("includeDomains"))
        want_text = bool((body.get("contents") or {}).get("text"))
        results = [
            {
                "id": d.url,
                "url": d.url,
                "title": d.title,
                "score": d.score,
                "publishedDate": None,
                "author": None,
                **({"text": d.text} if want_text else {}),
            }
            for d in docs[: int(body.get("numResults", 10))]
        ]
        return JSONResponse({"requestId": "fake-request", "resolvedSearchType": "neural", "results": results})

    return app


PROVIDER_APPS: dict[str, Callable[[FakeControl], FastAPI]] = {
    "serper": serper_app,
    "brave": brave_app,
    "tavily": tavily_app,
    "searxng": searxng_app,
    "exa": exa_app,
}


def echo_summary(messages: list[dict[str, str]]) -> str:
    """Default chat rule: "None" when the page says NOTHING-RELEVANT, else a summary naming the first page line."""
    prompt = messages[-1]["content"]
    if "NOTHING-RELEVANT" in prompt:
        return "None"
    page = prompt.split("Page text:\n", 1)[-1].strip().splitlines()
    return f"Summary: {page[0] if page else ''}"


def chat_app(control: FakeControl, answer: str | Callable[[list[dict[str, str]]], str] = echo_summary) -> FastAPI:
    """An OpenAI-compatible /v1/chat/completions; `answer` is a fixed string or a function of the messages."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        refusal, body = await _gate(
            control, request, lambda r, b: r.headers.get("authorization") == f"Bearer {control.api_key}"
        )
        if refusal:
            return refusal
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages or "model" not in body:
            return JSONResponse(status_code=400, content={"error": {"message": "model and messages are required"}})
        content = answer(messages) if callable(answer) else answer
        return JSONResponse(
            {
                "id": f"chatcmpl-{control.calls}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }
        )

    return app


ARTICLE = """<!doctype html><html><head><title>Alan Turing - Fake Wiki</title>
<style>body {color: red}</style><script>var tracker = "do not show";</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">Menu item</a></nav>
<main><h1>Alan Turing</h1>
<p>Alan Mathison Turing (23 June 1912 &ndash; 7 June 1954) was an English mathematician, computer scientist,
logician, cryptanalyst, philosopher and theoretical biologist.</p>
<p>He was highly influential in the development of theoretical computer science, providing a formalisation of
the concepts of algorithm and computation with the Turing machine.</p>
</main><footer>Copyright footer text</footer></body></html>"""


def pages_app(redirect_to: dict[str, str] | None = None) -> FastAPI:
    """Pages for fetch tests: an article, plain text, oversized and binary bodies, redirects, a slow page."""
    app = FastAPI()
    targets = redirect_to if redirect_to is not None else {}

    @app.get("/article")
    async def article() -> Response:
        return Response(ARTICLE, media_type="text/html; charset=utf-8")

    @app.get("/irrelevant")
    async def irrelevant() -> Response:
        return Response(
            "<html><body><main><p>NOTHING-RELEVANT cookie banner</p></main></body></html>", media_type="text/html"
        )

    @app.get("/plain")
    async def plain() -> Response:
        return PlainTextResponse("First line.\n\n  Second line.  \n")

    @app.get("/big")
    async def big() -> Response:
        # Streamed without Content-Length, so only counting the body can stop it.
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(400):
                yield b"<p>" + b"x" * 16_000 + b"</p>"

        return StreamingResponse(chunks(), media_type="text/html")

    @app.get("/binary")
    async def binary() -> Response:
        return Response(b"\x00\x01\x02" * 100, media_type="application/octet-stream")

    @app.get("/redirect/{name}")
    async def redirect(name: str) -> Response:
        return RedirectResponse(targets[name], status_code=302)

    @app.get("/loop")
    async def loop() -> Response:
        return RedirectResponse("/loop", status_code=302)

    @app.get("/missing")
    async def missing() -> Response:
        return PlainTextResponse("gone", status_code=404)

    @app.get("/slow")
    async def slow() -> Response:
        await asyncio.sleep(1.5)
        return PlainTextResponse("late")

    return app


def web_backend(provider: str, url: str, **options: Any) -> Any:
    """A WebSearchBackend on a loopback fake: no rate limit, fast backoff, unless `options` say otherwise."""
    from searchrl.search.web import PROVIDERS, WebSearchBackend

    settings: dict[str, Any] = {
        "rate_limit_per_s": None,
        "backoff_s": 0.01,
        "backoff_max_s": 0.05,
        "retries": 2,
        "timeout_s": 5.0,
    }
    settings.update(options)
    key = settings.pop("api_key", "test-key")
    return WebSearchBackend(PROVIDERS[provider](key, url), **settings)
