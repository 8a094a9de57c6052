"""The reward HTTP service: OpenRLHF's remote-reward protocol over the stage's reward spec.

OpenRLHF sends one request per finished sample, so thousands of tiny concurrent requests per step
are the normal load: small requests are scored inline (a thread hop would cost more than the
scoring), large ones (many samples or a big body) go to the thread pool so the event loop keeps
accepting connections.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool

from reward_server.idempotency import RecentAnswers, body_digest, log_fields, request_key, same_body
from reward_server.key_store import KeyStore, store_path
from searchrl.metrics import as_golds
from searchrl.protocols import get_protocol
from searchrl.reward.scoring import SampleScore, score_solution
from searchrl.reward.spec import RewardSpec
from searchrl.server import (
    BODY_ERRORS,
    Limits,
    RequestError,
    guard,
    is_authorized,
    parse_body,
    release_freed_memory,
    server_token,
    shown,
)

log = logging.getLogger("reward_server")

TOKEN_ENV = "SEARCHRL_REWARD_TOKEN"
SETTINGS_ENV = "SEARCHRL_REWARD_SETTINGS"
INLINE_BATCH = 16
INLINE_BYTES = 64 * 1024
# The environment runs at most a few dozen searches per episode; anything far beyond is not a count.
MAX_NUM_SEARCHES = 10_000


class RewardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: list[str] = Field(min_length=1, description="full decoded texts, prompt + response")
    prompts: list[str] | None = Field(None, description="the prompts; the solution is what follows them")
    # Checked by as_golds rather than by a pydantic union, so an error names `labels.i` and not a union branch.
    labels: list[Any] = Field(description="gold answers: a string, a list of strings, or a JSON-encoded list")
    metadata: list[dict[str, Any]] | None = Field(
        None, description="per sample, e.g. num_searches (a whole number >= 0: how many searches really ran)"
    )


class RewardResponse(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]


@dataclass
class ServerSettings:
    spec: RewardSpec
    preset: str | None = None
    log_jsonl: Path | None = None
    # One sample of a real episode is 10-50 KB (8 searches of 3 passages, 512-token segments).
    max_body_bytes: int = 4 * 1024 * 1024
    max_items: int = 4096
    max_query_chars: int = 256 * 1024
    max_golds: int = 1000
    token: SecretStr | str | None = field(default=None, repr=False)
    limits: Limits = field(default_factory=Limits)
    # Host names answered without a token besides loopback names and IP addresses (DNS rebinding).
    allowed_hosts: tuple[str, ...] = ()
    # Where the workers' keyed answers are shared (reward_server/key_store.py): beside the score log by default;
    # `--workers N` without a log gives one in a temporary folder.
    key_store: Path | None = None

    def key_store_path(self) -> Path | None:
        if self.key_store is not None:
            return self.key_store
        return store_path(self.log_jsonl) if self.log_jsonl is not None else None

    def to_env(self) -> str:
        """These settings (without the token, which workers read from its own variable) as JSON for workers."""
        return json.dumps(
            {
                "spec": self.spec.model_dump(mode="json"),
                "preset": self.preset,
                "log_jsonl": str(self.log_jsonl) if self.log_jsonl else None,
                "max_body_bytes": self.max_body_bytes,
                "max_items": self.max_items,
                "max_query_chars": self.max_query_chars,
                "max_golds": self.max_golds,
                "limits": asdict(self.limits),
                "allowed_hosts": list(self.allowed_hosts),
                "key_store": str(self.key_store) if self.key_store else None,
            }
        )

    @classmethod
    def from_env(cls, text: str) -> ServerSettings:
        data = json.loads(text)
        return cls(
            spec=RewardSpec.model_validate(data.pop("spec")),
            log_jsonl=Path(data.pop("log_jsonl")) if data.get("log_jsonl") else None,
            key_store=Path(data.pop("key_store")) if data.get("key_store") else None,
            limits=Limits(**data.pop("limits")),
            allowed_hosts=tuple(data.pop("allowed_hosts", ())),
            token=server_token(None, TOKEN_ENV),
            **{k: v for k, v in data.items() if k not in ("log_jsonl", "key_store")},
        )


class _ScoreLog:
    """Appends one JSON line per scored sample; each batch is one write to an O_APPEND file, so lines stay
    whole across threads and across worker processes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        # A predecessor killed mid-write leaves a torn last line; ours starts on a line of its own.
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")

    def write(self, records: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


def _parse(body: bytes) -> RewardRequest:
    return parse_body(body, RewardRequest)


def _check_num_searches(value: Any, where: str) -> None:
    # 3.0 is a whole number to JSON Schema (and to the OpenAPI schema we publish), so it is one here too.
    whole = type(value) is int or (type(value) is float and value.is_integer())
    if not whole or not 0 <= value <= MAX_NUM_SEARCHES:
        limit = f"must be a whole number from 0 to {MAX_NUM_SEARCHES} (the searches the environment ran)"
        raise RequestError(where, f"{limit}, got {shown(value)}")


def _validate_shape(req: RewardRequest, settings: ServerSettings) -> list[list[str]]:
    n = len(req.query)
    if n > settings.max_items:
        raise RequestError("query", f"{n} items, more than the limit of {settings.max_items}")
    for name in ("prompts", "labels", "metadata"):
        values = getattr(req, name)
        if values is not None and len(values) != n:
            raise RequestError(name, f"has {len(values)} items but query has {n}; the lists must be aligned")
    for name in ("query", "prompts"):
        for i, text in enumerate(getattr(req, name) or ()):
            if len(text) > settings.max_query_chars:
                raise RequestError(
                    f"{name}.{i}", f"{len(text)} characters, over the limit of {settings.max_query_chars}"
                )
    if req.metadata is not None:
        for i, meta in enumerate(req.metadata):
            if "num_searches" in meta:
                _check_num_searches(meta["num_searches"], f"metadata.{i}.num_searches")
    golds = []
    for i, label in enumerate(req.labels):
        try:
            gold = as_golds(label)
        except TypeError as e:
            raise RequestError(f"labels.{i}", str(e)) from None
        if len(gold) > settings.max_golds:
            raise RequestError(f"labels.{i}", f"{len(gold)} gold answers, over the limit of {settings.max_golds}")
        golds.append(gold)
    return golds


def _score_batch(req: RewardRequest, golds: list[list[str]], spec: RewardSpec) -> list[SampleScore]:
    results = []
    protocol = get_protocol(spec.reads)
    for i, text in enumerate(req.query):
        solution = text
        if req.prompts is not None:
            try:
                solution = protocol.split_solution(text, req.prompts[i])
            except ValueError:
                raise RequestError(f"prompts.{i}", "not found inside query; send the prompt the policy saw") from None
        if spec.search_r1:
            solution = text  # Search-R1 scores the whole decoded sequence, its instruction's tags included
        metadata = req.metadata[i] if req.metadata is not None else None
        results.append(score_solution(solution, golds[i], spec, metadata))
    return results


def _handle(body: bytes, settings: ServerSettings) -> tuple[RewardRequest, list[list[str]], list[SampleScore]]:
    req = _parse(body)
    golds = _validate_shape(req, settings)
    return req, golds, _score_batch(req, golds, settings.spec)


def _request_schema(settings: ServerSettings) -> dict[str, Any]:
    """RewardRequest's OpenAPI schema with the limits the server checks itself. What a schema cannot say: the
    lists are aligned with `query`, and each prompt is found inside its query."""
    schema = RewardRequest.model_json_schema()
    props = schema["properties"]
    text = {"type": "string", "maxLength": settings.max_query_chars}
    props["query"].update(maxItems=settings.max_items, items=text)
    props["prompts"]["anyOf"][0]["items"] = text
    golds = {"type": "array", "items": {"type": "string"}, "maxItems": settings.max_golds}
    props["labels"]["items"] = {"anyOf": [{"type": "string"}, golds]}
    count = {"type": "integer", "minimum": 0, "maximum": MAX_NUM_SEARCHES}
    props["metadata"]["anyOf"][0]["items"]["properties"] = {"num_searches": count}
    return schema


def _answer(records: list[dict[str, Any]]) -> bytes:
    """The response body for scored samples, each `{"reward", "score", "logs"}` (a SampleScore's or a log line's)."""
    out = {
        "rewards": [r["reward"] for r in records],
        "scores": [r["score"] for r in records],
        "extra_logs": {name: [r["logs"][name] for r in records] for name in records[0]["logs"]},
    }
    return to_json(out)


def _scored_answer(results: list[SampleScore]) -> bytes:
    """The response body for freshly scored samples."""
    return _answer([{"reward": r.reward, "score": r.score, "logs": r.logs} for r in results])


def create_app(settings: ServerSettings) -> FastAPI:
    state: dict[str, Any] = {"log": None, "scored": 0, "started": time.time()}
    # In-process: a retry while its first try runs here waits for it. Across workers and restarts: the store.
    answers = RecentAnswers()
    store_file = settings.key_store_path()
    store = KeyStore(store_file, settings.log_jsonl) if store_file is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if store is not None:
            await run_in_threadpool(store.open, _answer)
        state["log"] = _ScoreLog(settings.log_jsonl) if settings.log_jsonl else None
        if store is not None:
            store.write_to(state["log"])
        state["started"] = time.time()
        yield
        if store is not None:
            await store.drain()
            await run_in_threadpool(store.close)
        if state["log"] is not None:
            state["log"].close()

    app = FastAPI(title="searchrl reward server", lifespan=lifespan)
    guard(
        app,
        max_bytes=settings.max_body_bytes,
        token=server_token(settings.token, TOKEN_ENV),
        body_timeout_s=settings.limits.body_timeout_s,
        allowed_hosts=settings.allowed_hosts,
    )

    async def score(body: bytes, key: str | None, digest: str) -> bytes:
        req, golds, results = await _parse_and_score(body, settings)
        n = len(results)
        records = _log_records(req, golds, results, key, digest) if state["log"] is not None else []
        if store is not None and key is not None:
            settled = await store.settle(key, digest, _scored_answer(results), records)
            same_body(settled.digest, digest)
            if settled.ours:
                state["scored"] += n
            else:
                answers.replayed += 1  # another worker, or this one before a restart, scored it first
            return settled.answer
        state["scored"] += n
        if records:
            await run_in_threadpool(state["log"].write, records)
        return _scored_answer(results)

    _add_health_route(app, settings, state, answers)
    _add_reward_route(app, settings, answers, score)
    return app


def _add_health_route(app: FastAPI, settings: ServerSettings, state: dict[str, Any], answers: RecentAnswers) -> None:
    @app.get("/health", responses={403: BODY_ERRORS[403]})
    async def health(request: Request) -> dict[str, Any]:
        # Open for liveness checks; what the server runs (the spec) only with the token.
        if not is_authorized(request.scope):
            return {"status": "ok"}
        return {
            "status": "ok",
            "preset": settings.preset,
            "spec": settings.spec.model_dump(),
            "spec_digest": settings.spec.digest(),
            "weights": settings.spec.weights(),
            "scored": state["scored"],
            "retries_answered_again": answers.replayed,
            "uptime_s": round(time.time() - state["started"], 1),
            "pid": os.getpid(),
        }


def _add_reward_route(
    app: FastAPI,
    settings: ServerSettings,
    answers: RecentAnswers,
    score: Callable[[bytes, str | None, str], Awaitable[bytes]],
) -> None:
    # The body is parsed with a strict JSON parser, validated in Python mode and the answer written
    # directly: at thousands of tiny requests per step, FastAPI's generic body and response handling
    # cost more than the scoring. The schemas still appear in the OpenAPI spec.
    @app.post(
        "/get_reward",
        response_model=RewardResponse,
        responses=BODY_ERRORS,
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": _request_schema(settings)}}}
        },
    )
    async def get_reward(request: Request) -> Response:
        body = await request.body()
        key = request_key(request.scope["headers"])
        if key is None:
            answer = await score(body, None, "")
        else:
            digest = body_digest(body)
            answer = await answers.answer(key, digest, lambda: score(body, key, digest))
        return Response(answer, media_type="application/json")


async def _parse_and_score(
    body: bytes, settings: ServerSettings
) -> tuple[RewardRequest, list[list[str]], list[SampleScore]]:
    """Small requests are scored on the event loop; a big body, or many samples, in the thread pool."""
    if len(body) > INLINE_BYTES:
        try:
            return await run_in_threadpool(_handle, body, settings)
        finally:
            release_freed_memory()
    req = _parse(body)
    golds = _validate_shape(req, settings)
    if len(req.query) <= INLINE_BATCH:
        return req, golds, _score_batch(req, golds, settings.spec)
    return req, golds, await run_in_threadpool(_score_batch, req, golds, settings.spec)


def _log_records(
    req: RewardRequest, golds: list[list[str]], results: list[SampleScore], key: str | None, digest: str
) -> list[dict[str, Any]]:
    """The score log's line for each sample of a request."""
    n = len(results)
    return [
        {
            **log_fields(key, digest, i, n),
            "reward": r.reward,
            "score": r.score,
            "logs": r.logs,
            "time": time.time(),
            "query": q,
            "labels": g,
        }
        for i, (q, g, r) in enumerate(zip(req.query, golds, results, strict=True))
    ]


def app_from_env() -> FastAPI:
    """The app for a `--workers` process: settings from $SEARCHRL_REWARD_SETTINGS, token from its own variable."""
    return create_app(ServerSettings.from_env(os.environ[SETTINGS_ENV]))
