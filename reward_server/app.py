"""The reward HTTP service: OpenRLHF's remote-reward protocol over the stage's reward spec.

OpenRLHF sends one request per finished sample, so thousands of tiny concurrent requests per step
are the normal load: small batches are scored inline (a thread hop would cost more than the
scoring), large ones go to the thread pool so the event loop keeps accepting connections.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from eval.metrics import as_golds
from reward_server.scoring import SampleScore, score_solution
from reward_server.spec import RewardSpec
from rollout.asgi_limits import BodyLimit
from rollout.protocol import split_solution

log = logging.getLogger("reward_server")

TOKEN_ENV = "SEARCHRL_REWARD_TOKEN"
INLINE_BATCH = 16


class RewardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: list[str] = Field(min_length=1, description="full decoded texts, prompt + response")
    prompts: list[str] | None = Field(None, description="the prompts; the solution is what follows them")
    # Checked by as_golds rather than by a pydantic union, so an error names `labels.i` and not a union branch.
    labels: list[Any] = Field(description="gold answers: a string, a list of strings, or a JSON-encoded list")
    metadata: list[dict[str, Any]] | None = Field(None, description="per sample, e.g. num_searches")


class RewardResponse(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]


class RequestError(Exception):
    """A request that is well typed but inconsistent; answered with 422 naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class ServerSettings:
    spec: RewardSpec
    preset: str | None = None
    log_jsonl: Path | None = None
    max_body_bytes: int = 64 * 1024 * 1024
    max_items: int = 4096
    token: str | None = field(default=None, repr=False)


class _ScoreLog:
    """Appends one JSON line per scored sample; a lock keeps lines whole across threads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: TextIO = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, records: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        with self._lock:
            self._fh.write(text)
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def _validate_shape(req: RewardRequest, max_items: int) -> list[list[str]]:
    n = len(req.query)
    if n > max_items:
        raise RequestError("query", f"{n} items, more than the limit of {max_items}")
    for name in ("prompts", "labels", "metadata"):
        values = getattr(req, name)
        if values is not None and len(values) != n:
            raise RequestError(name, f"has {len(values)} items but query has {n}; the lists must be aligned")
    golds = []
    for i, label in enumerate(req.labels):
        try:
            golds.append(as_golds(label))
        except TypeError as e:
            raise RequestError(f"labels.{i}", str(e)) from None
    return golds


def _score_batch(req: RewardRequest, golds: list[list[str]], spec: RewardSpec) -> list[SampleScore]:
    results = []
    for i, text in enumerate(req.query):
        solution = text
        if req.prompts is not None:
            try:
                solution = split_solution(text, req.prompts[i])
            except ValueError:
                raise RequestError(f"prompts.{i}", "not found inside query; send the prompt the policy saw") from None
        metadata = req.metadata[i] if req.metadata is not None else None
        results.append(score_solution(solution, golds[i], spec, metadata))
    return results


def _error(status: int, field_name: str, message: str) -> JSONResponse:
    return JSONResponse({"detail": f"{field_name}: {message}", "field": field_name}, status_code=status)


def _first_error(errors: Sequence[Any]) -> JSONResponse:
    first = errors[0]
    name = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
    return _error(422, name, first["msg"])


def _validation_error(e: ValidationError) -> JSONResponse:
    return _first_error(e.errors(include_url=False))


_REQUEST_SCHEMA = RewardRequest.model_json_schema()


def create_app(settings: ServerSettings) -> FastAPI:
    state: dict[str, Any] = {"log": None, "scored": 0, "started": time.time()}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state["log"] = _ScoreLog(settings.log_jsonl) if settings.log_jsonl else None
        state["started"] = time.time()
        yield
        if state["log"] is not None:
            state["log"].close()

    app = FastAPI(title="searchrl reward server", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _first_error(exc.errors())

    @app.exception_handler(RequestError)
    async def _inconsistent(request: Request, exc: RequestError) -> JSONResponse:
        return _error(422, exc.field, exc.message)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "preset": settings.preset,
            "spec": settings.spec.model_dump(),
            "scored": state["scored"],
            "uptime_s": round(time.time() - state["started"], 1),
        }

    # The body is validated with pydantic-core's JSON parser and the answer written directly: at
    # thousands of tiny requests per step, FastAPI's generic body and response handling cost more
    # than the scoring. The schemas still appear in the OpenAPI spec.
    @app.post(
        "/get_reward",
        response_model=RewardResponse,
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": _REQUEST_SCHEMA}}}
        },
    )
    async def get_reward(request: Request) -> Response:
        if settings.token is not None:
            sent = request.headers.get("authorization", "")
            if not secrets.compare_digest(sent.encode(), f"Bearer {settings.token}".encode()):
                return _error(401, "authorization", "missing or wrong bearer token")
        try:
            req = RewardRequest.model_validate_json(await request.body())
        except ValidationError as e:
            return _validation_error(e)
        golds = _validate_shape(req, settings.max_items)
        if len(req.query) <= INLINE_BATCH:
            results = _score_batch(req, golds, settings.spec)
        else:
            results = await run_in_threadpool(_score_batch, req, golds, settings.spec)
        state["scored"] += len(results)
        if state["log"] is not None:
            records = [
                {"query": q, "labels": g, "reward": r.reward, "score": r.score, "logs": r.logs, "time": time.time()}
                for q, g, r in zip(req.query, golds, results, strict=True)
            ]
            await run_in_threadpool(state["log"].write, records)
        names = results[0].logs.keys()
        body = {
            "rewards": [r.reward for r in results],
            "scores": [r.score for r in results],
            "extra_logs": {name: [r.logs[name] for r in results] for name in names},
        }
        return Response(json.dumps(body), media_type="application/json")

    return app


def token_from_env() -> str | None:
    return os.environ.get(TOKEN_ENV) or None
