"""Retrieval HTTP server: POST /search, R1-Searcher's POST /queries, Search-R1's POST /retrieve, GET /health,
POST /admin/reload (load an index rebuilt in place; SIGHUP does the same)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictBool, StrictStr

from search_backend.serve.batching import MicroBatcher
from search_backend.serve.cache import ResultCache
from search_backend.serve.index_reload import IndexWatch, ReloadError, reload_on_sighup
from searchrl.search.base import Passage, SearchBackend, normalise_query, r1_text
from searchrl.search.index.cpu_threads import Threads, configure, policy, restore, short_openmp_spin
from searchrl.search.index_settings import HybridConfig, IndexSettings
from searchrl.search.settings import IndexBackend
from searchrl.search.web.errors import WebBudgetExhaustedError
from searchrl.server import (
    BODY_ERRORS,
    ErrorBody,
    Limits,
    RequestError,
    WholeNumber,
    error_response,
    guard,
    is_authorized,
    parse_body,
    release_freed_memory,
    server_token,
    shown,
    uvicorn_options,
)

log = logging.getLogger("search_backend.serve")
TOKEN_ENV = "SEARCHRL_SEARCH_TOKEN"
RELEASE_AFTER_CHARS = 2000  # query characters in a backend call after which freed memory is handed back
RELEASE_IDLE_S = 0.25  # ...once no call has run for this long
LARGE_ANSWER = 2000  # passages in an answer above which it is encoded off the event loop


class ServerConfig(IndexSettings):
    backend: IndexBackend = Field(
        default="local", description="over index_dir: dense (the manifest's index type), BM25, or both fused"
    )
    batching: bool = True
    max_batch: int = Field(default=64, ge=1)
    max_batch_chars: int = Field(default=8192, ge=1, description="query characters per batch (encoder memory)")
    max_wait_ms: float = Field(default=2.0, ge=0)
    split_min: int = Field(
        default=0,
        ge=0,
        description="with at least twice this many queries in flight, each batch takes half of them, so the "
        "encoder works while the event loop answers the other half (0: never; pays with --forward-batch 64)",
    )
    cache_size: int = Field(default=100_000, ge=0)
    latency_s: float = Field(
        default=0.0,
        ge=0,
        description="seconds added to every search request, as a web provider takes (0.5-3 s): to measure training "
        "against slow search with a local index (benchmarks/async_rollout.py); 0 otherwise",
    )
    max_top_k: int = Field(default=100, ge=1)
    # Search-R1's trainer sends a whole turn's queries in one POST: 512 prompts x 5 samples under its GRPO script.
    max_queries: int = Field(default=4096, ge=1)
    max_query_chars: int = Field(default=512, ge=1, description="longest query; search queries are a few words")
    max_results: int = Field(default=10_000, ge=1, description="queries x top_k in one request (answer size)")
    max_body_bytes: int = Field(default=1 << 20, ge=1)
    token: SecretStr | None = Field(default=None, description=f"bearer token; default: the {TOKEN_ENV} env var")
    threads: Annotated[int, Field(ge=1)] | Literal["auto"] | None = Field(
        default=None,
        description="torch and FAISS CPU threads per search; auto (the command's default on CPU): one fewer than the "
        "cores, all of them while other processes leave them idle; none: the thread pools are left alone",
    )
    limits: Limits = Field(default_factory=Limits, description="header/body deadlines, concurrency cap")
    allowed_hosts: list[str] = Field(
        default_factory=list, description="host names answered without a token besides loopback and IPs (*: any)"
    )


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queries: list[StrictStr]
    top_k: WholeNumber = 3


class R1Request(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queries: list[StrictStr]
    k: WholeNumber = 3


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queries: list[StrictStr]
    topk: WholeNumber = 3
    return_scores: StrictBool = False


class ReloadRequest(BaseModel):
    """`{}`: the body only carries the content type that keeps a cross-site form from posting here."""

    model_config = ConfigDict(extra="forbid")


class PassageOut(BaseModel):
    id: str
    title: str
    text: str
    score: float


class SearchResponse(BaseModel):
    results: list[list[PassageOut]] = Field(description="per query, in order: its top_k passages, best first")


class R1Response(BaseModel):
    queries: list[str]
    answers: list[list[str]] = Field(description="per query: its passages as R1-Searcher's `title text` strings")


class SearchR1Document(BaseModel):
    id: str
    contents: str = Field(description="the quoted title, a newline, the text")


class ScoredDocument(BaseModel):
    document: SearchR1Document
    score: float


class RetrieveResponse(BaseModel):
    result: list[list[SearchR1Document]] | list[list[ScoredDocument]] = Field(
        description="per query: its documents, with their scores when return_scores is true"
    )


def format_r1(passage: Passage) -> str:
    return r1_text(passage)


def format_search_r1(passage: Passage) -> dict[str, str]:
    """Search-R1's document: `contents` is the quoted title, a newline, then the text."""
    return {"id": passage.id, "contents": f'"{passage.title}"\n{passage.text}'}


class SearchService:
    """Cache in front of the (optionally micro-batched) backend."""

    def __init__(self, backend: SearchBackend, config: ServerConfig) -> None:
        self.backend = backend
        self.config = config
        self.cache = ResultCache(config.cache_size)
        self.version = getattr(backend, "version", "")
        self._release: asyncio.TimerHandle | None = None
        self._large_since_release = False
        self.batcher = (
            MicroBatcher(
                self._search, config.max_batch, config.max_wait_ms / 1000, config.max_batch_chars, config.split_min
            )
            if config.batching
            else None
        )

    async def _search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if self._release is not None:
            self._release.cancel()
            self._release = None
        self._large_since_release |= sum(map(len, queries)) >= RELEASE_AFTER_CHARS
        try:
            return await self.backend.search(queries, top_k)
        finally:
            if self._large_since_release:
                self._release = asyncio.get_running_loop().call_later(RELEASE_IDLE_S, self._release_memory)

    async def stop(self) -> None:
        if self.batcher:
            await self.batcher.stop()
        if self._release is not None:
            self._release.cancel()

    def _release_memory(self) -> None:
        # Encoding leaves freed activations in the allocator's per-thread arenas; without this the resident
        # size ratchets up to the largest batch's peak and stays there. Only once the server is idle: under
        # load the next batch faulted the same pages back in (8-13% of requests/s at 64 callers, docs/BENCHMARKS.md).
        self._release = None
        self._large_since_release = False
        release_freed_memory()

    def swap(self, backend: SearchBackend) -> str:
        """Serve `backend` from now on (a reloaded index); returns the previous version. Cached results are
        keyed by version, so none of the old index's is served again."""
        previous, self.backend = self.version, backend
        self.version = getattr(backend, "version", "")
        self.cache = ResultCache(self.config.cache_size)
        return previous

    def validate(self, queries: list[str], top_k: int, queries_field: str, k_field: str) -> None:
        if not queries:
            raise RequestError(queries_field, "must hold at least one query")
        if len(queries) > self.config.max_queries:
            raise RequestError(queries_field, f"{len(queries)} queries is over the limit of {self.config.max_queries}")
        for i, query in enumerate(queries):
            # An empty query is answered as the backend ranks it (a dense index embeds it, as Search-R1's
            # retriever does for an empty `<search></search>`; BM25 and web search find nothing).
            if len(query) > self.config.max_query_chars:
                raise RequestError(
                    f"{queries_field}.{i}",
                    f"{len(query)} characters is over the limit of {self.config.max_query_chars}",
                )
            try:
                query.encode("utf-8")
            except UnicodeEncodeError:
                # Checked here, before batching: the tokenizer would fail the whole micro-batch on it.
                raise RequestError(
                    f"{queries_field}.{i}", "not valid Unicode (a lone surrogate); send UTF-8 text"
                ) from None
        if not 1 <= top_k <= self.config.max_top_k:
            raise RequestError(k_field, f"must be between 1 and {self.config.max_top_k}, got {shown(top_k)}")
        if len(queries) * top_k > self.config.max_results:
            raise RequestError(
                queries_field,
                f"{len(queries)} queries at {k_field} {top_k} is {len(queries) * top_k} results, over the limit of "
                f"{self.config.max_results}; send fewer queries per request or a smaller {k_field}",
            )

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        if self.config.latency_s:
            await asyncio.sleep(self.config.latency_s)  # other requests are served meanwhile, as a provider's are
        keys = [(normalise_query(q), top_k, self.version) for q in queries]
        results: list[list[Passage] | None] = [self.cache.get(k) for k in keys]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            run = self.batcher.search if self.batcher else self._search
            found = await run([queries[i] for i in missing], top_k)
            for i, hits in zip(missing, found, strict=True):
                results[i] = hits
                self.cache.put(keys[i], hits)
        return results  # type: ignore[return-value]

    def health(self) -> dict:
        answer = {
            "status": "ok",
            "retriever": getattr(self.backend, "retriever", None),
            "index_type": (getattr(self.backend, "manifest", None) or {}).get("index_type"),
            "manifest": getattr(self.backend, "manifest", None),
            # What the index measured it keeps of the exact top-10 when it was made, and the settings it serves.
            "recall": (getattr(self.backend, "manifest", None) or {}).get("recall"),
            "search_params": getattr(self.backend, "search_params", None),
            "index_version": self.version,
            "cache": self.cache.stats(),
            "latency_s": self.config.latency_s,
            "batching": self.batcher.stats() if self.batcher else {"enabled": False},
            "cpu_threads": (threads.stats() if (threads := policy()) else None),
        }
        # A web backend's meter: what the run sent to the provider, its cache hits and estimated spend.
        if (budget := getattr(self.backend, "web_budget", None)) is not None:
            answer["web_budget"] = budget.stats()
        return answer


HEALTH_ERRORS = {403: BODY_ERRORS[403]}
SEARCH_ERRORS = {
    **BODY_ERRORS,
    402: {"model": ErrorBody, "description": "a web backend's budget (search.web.max_queries or max_usd) is spent"},
}
RELOAD_ERRORS = {
    **BODY_ERRORS,
    409: {"model": ErrorBody, "description": "the index directory cannot be loaded now; the old index stays served"},
}


def _schema(model: type[BaseModel], config: ServerConfig, k_field: str) -> dict[str, Any]:
    """The request body's OpenAPI schema with the limits the server checks itself (they come from its config);
    the one limit a schema cannot say is queries x k <= max_results."""
    schema = model.model_json_schema()
    props = schema["properties"]
    props["queries"].update(
        minItems=1,
        maxItems=config.max_queries,
        items={"type": "string", "maxLength": config.max_query_chars},
    )
    props[k_field].update(minimum=1, maximum=config.max_top_k)
    return _body_schema(schema)


def _body_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def json_answer(content: dict[str, Any], results: int) -> Response:
    """The answer as JSON, encoded directly (FastAPI's generic encoder walks every passage); in a thread when large."""
    if results > LARGE_ANSWER:
        return Response(await asyncio.to_thread(json.dumps, content), media_type="application/json")
    return Response(json.dumps(content), media_type="application/json")


def create_app(config: ServerConfig, backend: SearchBackend | None = None) -> FastAPI:
    """The server app; its lifespan opens the local index (unless a backend is given) and the batcher."""
    token = server_token(config.token, TOKEN_ENV)

    def open_index() -> SearchBackend:
        # The factory imports every backend, FAISS with them: main() must shorten libgomp's spin before FAISS or
        # torch first loads it, so the server's module imports neither.
        from searchrl.search.backends import SearchConfig, open_backend

        return open_backend(SearchConfig(backend=config.backend, **config.index_settings()))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = backend is None
        previous_threads = configure(config.threads) if config.threads else policy()
        active = backend
        watch = None
        if active is None:
            if config.index_dir is None:
                raise ValueError("index_dir: required when no backend is given")
            watch = IndexWatch(config.index_dir)
            active = await asyncio.to_thread(open_index)
        service = SearchService(active, config)
        if service.batcher:
            service.batcher.start()
        app.state.service = service
        app.state.watch = watch
        unlisten = reload_on_sighup(lambda: reload(app)) if watch else None
        try:
            yield
        finally:
            if unlisten:
                unlisten()
            await service.stop()
            if owned:
                await service.backend.aclose()
            restore(previous_threads)

    async def reload(app: FastAPI) -> dict:
        if app.state.watch is None:
            raise ReloadError("this server was given its backend, not an index directory; there is nothing to reload")
        return await app.state.watch.reload(open_index, app.state.service.swap)

    app = FastAPI(title="searchrl retrieval server", lifespan=lifespan)
    # Token, content type and body size are checked before the body is read (searchrl/server.py).
    guard(
        app,
        max_bytes=config.max_body_bytes,
        token=token,
        body_timeout_s=config.limits.body_timeout_s,
        allowed_hosts=config.allowed_hosts,
    )

    @app.exception_handler(WebBudgetExhaustedError)
    async def _budget_exhausted(request: Request, exc: WebBudgetExhaustedError) -> Response:
        return error_response(exc.http_status, exc.field, str(exc))

    _add_health_and_reload_routes(app, reload)
    _add_search_routes(app, config)
    return app


def _add_health_and_reload_routes(app: FastAPI, reload: Callable[[FastAPI], Awaitable[dict]]) -> None:
    @app.get("/health", responses=HEALTH_ERRORS)
    async def health(request: Request) -> dict:
        # Open for liveness checks; the manifest (corpus path, checksum) only with the token.
        if not is_authorized(request.scope):
            return {"status": "ok"}
        answer = request.app.state.service.health()
        if request.app.state.watch is not None:
            answer["index_on_disk"] = request.app.state.watch.state()
        return answer

    @app.post("/admin/reload", responses=RELOAD_ERRORS, openapi_extra=_body_schema(ReloadRequest.model_json_schema()))
    async def admin_reload(request: Request) -> Response:
        parse_body(await request.body(), ReloadRequest)
        try:
            answer = await reload(request.app)
        except ReloadError as exc:
            return error_response(409, "index_dir", str(exc))
        return await json_answer(answer, 0)


def _add_search_routes(app: FastAPI, config: ServerConfig) -> None:
    """POST /search and the two other projects' protocols, POST /queries (R1-Searcher) and /retrieve (Search-R1)."""

    @app.post(
        "/search",
        openapi_extra=_schema(SearchRequest, config, "top_k"),
        response_model=SearchResponse,
        responses=SEARCH_ERRORS,
    )
    async def search(request: Request) -> Response:
        body = parse_body(await request.body(), SearchRequest)
        service: SearchService = request.app.state.service
        service.validate(body.queries, body.top_k, "queries", "top_k")
        results = await service.search(body.queries, body.top_k)
        return await json_answer(
            {"results": [[p.to_dict() for p in hits] for hits in results]}, len(results) * body.top_k
        )

    @app.post(
        "/queries", openapi_extra=_schema(R1Request, config, "k"), response_model=R1Response, responses=SEARCH_ERRORS
    )
    async def r1_queries(request: Request) -> Response:
        body = parse_body(await request.body(), R1Request)
        service: SearchService = request.app.state.service
        service.validate(body.queries, body.k, "queries", "k")
        results = await service.search(body.queries, body.k)
        answers = [[format_r1(p) for p in hits] for hits in results]
        return await json_answer({"queries": body.queries, "answers": answers}, len(results) * body.k)

    @app.post(
        "/retrieve",
        openapi_extra=_schema(RetrieveRequest, config, "topk"),
        response_model=RetrieveResponse,
        responses=SEARCH_ERRORS,
    )
    async def retrieve(request: Request) -> Response:
        body = parse_body(await request.body(), RetrieveRequest)
        service: SearchService = request.app.state.service
        service.validate(body.queries, body.topk, "queries", "topk")
        results = await service.search(body.queries, body.topk)
        if body.return_scores:
            result = [[{"document": format_search_r1(p), "score": p.score} for p in hits] for hits in results]
        else:
            result = [[format_search_r1(p) for p in hits] for hits in results]
        return await json_answer({"result": result}, len(results) * body.topk)


def _weights(text: str) -> tuple[float, float]:
    try:
        dense, bm25 = (float(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected two numbers, dense,bm25 (e.g. 1,0.5)") from None
    return dense, bm25


def threads_arg(text: str) -> Threads:
    if text == "auto":
        return "auto"
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 or auto, got {text!r}")
    return threads


def _default(field: str) -> Any:
    # The server's options take their defaults from ServerConfig, the one declaration of them.
    return ServerConfig.model_fields[field].get_default(call_default_factory=True)


def _help(field: str) -> str | None:
    return ServerConfig.model_fields[field].description


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="searchrl search serve", description=__doc__)
    p.add_argument("--index", required=True, help="index directory made by searchrl.search.index.build")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--port", type=int, default=8002)
    p.add_argument(
        "--backend",
        default="local",
        choices=("local", "bm25", "hybrid"),
        help="local: dense search with the index's type; bm25: lexical (needs build_index --bm25); "
        "hybrid: both, fused by reciprocal rank",
    )
    p.add_argument("--device", default=_default("device"), choices=("cpu", "cuda"))
    p.add_argument("--nprobe", type=int, default=_default("nprobe"), help=_help("nprobe"))
    p.add_argument("--rerank-depth", type=int, default=_default("rerank_depth"), help=_help("rerank_depth"))
    p.add_argument(
        "--hybrid-weights",
        default=(HybridConfig().dense_weight, HybridConfig().bm25_weight),
        type=_weights,
        help="hybrid: dense,bm25 weights of the rank fusion (default 1,1)",
    )
    p.add_argument("--rrf-k", type=float, default=HybridConfig().rrf_k, help="hybrid: reciprocal-rank offset")
    p.add_argument("--ef-search", type=int, default=_default("ef_search"), help=_help("ef_search"))
    p.add_argument("--forward-batch", type=int, default=_default("forward_batch"), help=_help("forward_batch"))
    p.add_argument(
        "--encoder-backend",
        choices=("auto", "torch", "onnx", "onnx-int8"),
        default=_default("encoder_backend"),
        help=_help("encoder_backend"),
    )
    p.add_argument("--no-batching", action="store_true", help="run each request on its own")
    p.add_argument(
        "--max-batch", type=int, default=_default("max_batch"), help="most queries coalesced into one batch"
    )
    p.add_argument(
        "--max-wait-ms", type=float, default=_default("max_wait_ms"), help="longest a batch waits for more requests"
    )
    p.add_argument("--split-min", type=int, default=_default("split_min"), help=_help("split_min"))
    p.add_argument("--cache-size", type=int, default=_default("cache_size"), help="LRU result-cache entries (0: off)")
    p.add_argument("--latency-s", type=float, default=_default("latency_s"), help=_help("latency_s"))
    p.add_argument("--max-top-k", type=int, default=_default("max_top_k"))
    p.add_argument("--max-queries", type=int, default=_default("max_queries"), help="most queries in one request")
    p.add_argument("--max-query-chars", type=int, default=_default("max_query_chars"), help=_help("max_query_chars"))
    p.add_argument("--max-results", type=int, default=_default("max_results"), help=_help("max_results"))
    p.add_argument("--max-batch-chars", type=int, default=_default("max_batch_chars"), help=_help("max_batch_chars"))
    p.add_argument("--max-body-bytes", type=int, default=_default("max_body_bytes"))
    p.add_argument(
        "--header-timeout", type=float, default=Limits().header_timeout_s, help="seconds a request's headers may take"
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=Limits().body_timeout_s,
        help="seconds a request's body may take (408 after)",
    )
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=Limits().max_concurrency,
        help="open connections or requests in flight before 503s",
    )
    p.add_argument("--threads", type=threads_arg, default=_default("threads"), help=_help("threads"))
    p.add_argument(
        "--allowed-hosts",
        default="",
        help="without a token, Host names answered besides loopback names and IP addresses (comma-separated; *: any)",
    )
    p.add_argument("--log-level", default="warning")
    return p


def main(argv: list[str] | None = None) -> int:
    # Before anything loads torch or FAISS: libgomp reads its spin count once (searchrl/search/index/cpu_threads.py).
    short_openmp_spin()
    import uvicorn

    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    config = config_from_args(args)
    uvicorn.run(
        create_app(config), host=args.host, port=args.port, log_level=args.log_level, **uvicorn_options(config.limits)
    )
    return 0


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's settings from its command line, for this command and for its Ray Serve replicas alike."""
    dense_weight, bm25_weight = args.hybrid_weights
    return ServerConfig(
        index_dir=args.index,
        backend=args.backend,
        rerank_depth=args.rerank_depth,
        hybrid=HybridConfig(dense_weight=dense_weight, bm25_weight=bm25_weight, rrf_k=args.rrf_k),
        device=args.device,
        nprobe=args.nprobe,
        ef_search=args.ef_search,
        forward_batch=args.forward_batch,
        encoder_backend=args.encoder_backend,
        batching=not args.no_batching,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        split_min=args.split_min,
        cache_size=args.cache_size,
        latency_s=args.latency_s,
        max_top_k=args.max_top_k,
        max_queries=args.max_queries,
        max_body_bytes=args.max_body_bytes,
        # The process-wide thread pools are the command's to size; create_app in a host process leaves them alone.
        threads=args.threads or ("auto" if args.device == "cpu" else None),
        max_query_chars=args.max_query_chars,
        max_results=args.max_results,
        max_batch_chars=args.max_batch_chars,
        allowed_hosts=[h.strip() for h in f"{args.allowed_hosts},{args.host}".split(",") if h.strip()],
        limits=Limits(
            header_timeout_s=args.header_timeout,
            body_timeout_s=args.body_timeout,
            max_concurrency=args.max_concurrency,
        ),
    )


if __name__ == "__main__":
    raise SystemExit(main())
