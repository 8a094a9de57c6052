"""A loopback pool of "LLMs" for CPU runs of LLM routing (the rehearsal, routing evaluations, tests):
one OpenAI-compatible server answering `/v1/chat/completions` for every model of a pool.

Answers are canned but depend on the question: each model knows the gold answers of a question set
and answers a question right with its own probability (its `skill`), decided by a stable hash of
model and question, so a run is reproducible and a stronger model is right more often. A question
is matched to the known one sharing most words; an unknown question gets "I do not know.".
`usage` counts words as tokens, so the router's price arithmetic runs as it does against a real pool.

    python -m searchrl.routing.loopback_pool --qa QUESTIONS.jsonl --config configs/stages/router_r1.yaml --port N
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from searchrl.config import ConfigError
from searchrl.process import free_port, start_module
from searchrl.routing.llm_router import RouterConfig, read_pool

LOW_SKILL, HIGH_SKILL = 0.3, 0.9
UNKNOWN = "I do not know."


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _unit(*parts: str) -> float:
    """A stable number in [0, 1) from the parts (not Python's per-process salted hash)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def skills_by_price(pool: RouterConfig) -> dict[str, float]:
    """Each pool model's skill by price rank: the cheapest LOW_SKILL, the dearest HIGH_SKILL, linear between.
    Keyed by the model name the endpoint is asked for (`model`)."""
    price = {m.model: m.price_per_1k_prompt + m.price_per_1k_completion for m in pool.models}
    ranked = sorted(price, key=lambda k: price[k])
    if len(ranked) == 1:
        return {ranked[0]: HIGH_SKILL}
    return {m: LOW_SKILL + (HIGH_SKILL - LOW_SKILL) * i / (len(ranked) - 1) for i, m in enumerate(ranked)}


def read_qa(path: str | Path) -> dict[str, list[str]]:
    """question -> golds from JSON lines: `question`/`query` with `answer`/`ground_truth`/`golden_answers`/`label`."""
    qa: dict[str, list[str]] = {}
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        question = row.get("question") or row.get("query")
        gold = next((row[k] for k in ("answer", "ground_truth", "golden_answers", "label") if k in row), None)
        if not question or gold is None:
            raise ValueError(f"{path}:{i}: needs question (or query) and answer (or ground_truth, label)")
        if isinstance(gold, str) and gold.startswith("["):
            gold = json.loads(gold)  # a prompt-data label holding several golds
        qa[str(question).strip()] = [gold] if isinstance(gold, str) else [str(g) for g in gold]
    return qa


class CannedPool:
    def __init__(self, qa: dict[str, list[str]], skills: dict[str, float]) -> None:
        self.qa = qa
        self.skills = skills
        self.index = [(q, _words(q)) for q in qa]
        self.calls: dict[str, int] = dict.fromkeys(skills, 0)

    def known(self, question: str) -> str | None:
        asked = _words(question)
        best, score = None, 0.0
        for q, words in self.index:
            overlap = len(asked & words) / max(1, len(asked | words))
            if overlap > score:
                best, score = q, overlap
        return best if score >= 0.3 else None

    def answer(self, model: str, question: str) -> str:
        known = self.known(question)
        if known is None:
            return UNKNOWN
        golds = self.qa[known]
        if _unit(model, known) < self.skills[model]:
            return golds[0]
        # A wrong answer that looks like one: the gold of another question, chosen by the same hash.
        others = [g for q, gs in self.qa.items() if q != known for g in gs[:1] if g not in golds]
        return others[int(_unit("wrong", model, known) * len(others))] if others else UNKNOWN


def create_app(qa: dict[str, list[str]], skills: dict[str, float]) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.pool = CannedPool(qa, skills)
        yield

    app = FastAPI(title="searchrl loopback LLM pool", lifespan=lifespan)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        pool: CannedPool = request.app.state.pool
        return {"status": "ok", "models": pool.skills, "questions": len(pool.qa), "calls": pool.calls}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": m, "object": "model"} for m in request.app.state.pool.skills]}

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        pool: CannedPool = request.app.state.pool
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(status_code=400, content={"error": {"message": "body is not JSON", "field": "body"}})
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            return JSONResponse(
                status_code=400, content={"error": {"message": "messages required", "field": "messages"}}
            )
        model = body.get("model")
        if model not in pool.skills:
            return JSONResponse(
                status_code=404,
                content={"error": {"message": f"model {model!r} is not served here", "field": "model"}},
            )
        # A framed question (the router's `framing`) ends with the question on its own line.
        lines = [line for line in str(messages[-1].get("content", "")).splitlines() if line.strip()]
        question = lines[-1] if lines else ""
        text = pool.answer(model, question)
        pool.calls[model] += 1
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
        return JSONResponse(
            {
                "id": f"loopback-{sum(pool.calls.values())}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": len(text.split()),
                    "total_tokens": prompt_tokens + len(text.split()),
                },
            }
        )

    return app


def repoint(pool: RouterConfig, url: str) -> RouterConfig:
    """The pool with every model served at `url` (one loopback server answers for all of them)."""
    return pool.model_copy(update={"models": [m.model_copy(update={"base_url": url}) for m in pool.models]})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m searchrl.routing.loopback_pool",
        description="Serve a canned, question-dependent pool of models on loopback (OpenAI-compatible).",
    )
    p.add_argument("--qa", required=True, help="JSONL of questions and gold answers the pool knows")
    p.add_argument("--config", default=None, help="a stage config: serve its search.router models, skill by price")
    p.add_argument("--skill", action="append", default=[], metavar="MODEL=P", help="a model and its P(right)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    return p


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = build_parser().parse_args(argv)
    skills: dict[str, float] = {}
    if args.config:
        try:
            skills.update(skills_by_price(read_pool(args.config)))
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    for item in args.skill:
        model, _, value = item.rpartition("=")
        skills[model] = float(value)
    if not skills:
        print("error: give --config STAGE.yaml or --skill MODEL=P", file=sys.stderr)
        return 2
    uvicorn.run(create_app(read_qa(args.qa), skills), host=args.host, port=args.port, log_level="warning")
    return 0


def start_loopback(pool: RouterConfig, qa: list[dict[str, Any]], workdir: Path) -> tuple[subprocess.Popen, str]:
    """A loopback LLM pool server (`searchrl/routing/loopback_pool.py`, free port) knowing `qa` (question, answer),
    skills by price; returns the process and the base URL to give every pool model."""
    file = workdir / "loopback_qa.jsonl"
    file.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in qa), encoding="utf-8")
    port = free_port()
    skills = [arg for model, p in skills_by_price(pool).items() for arg in ("--skill", f"{model}={p}")]
    proc = start_module(
        "searchrl.routing.loopback_pool", ["--qa", str(file), *skills], port, workdir / "loopback_pool.log"
    )
    return proc, f"http://127.0.0.1:{port}/v1"


if __name__ == "__main__":
    sys.exit(main())
