"""Every HTTP client of the project at the concurrency a rollout batch produces (~1,000 in flight), on real
loopback servers: every call answered, every answer the right one, again after an idle pause longer than the
server's keep-alive (so pooled connections have gone stale). The full 20,000-request figures are in
benchmarks/load.py; these counts keep the suite fast while still putting 1,000 calls in flight."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fastapi import FastAPI

from eval.generation import GenParams, OpenAICompletionsEngine
from eval.judge import LLMJudge
from reward_server.app import ServerSettings, create_app
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as create_search_app
from searchrl.metrics import as_golds
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS
from searchrl.rollout.reward_client import RewardClient
from searchrl.rollout.search_step import open_search_step
from searchrl.search.base import Passage
from searchrl.search.http_client import HttpSearchBackend
from searchrl.stage.search import StageSearchConfig
from tests.conftest import FIXTURES, serve
from tests.fakes_web import CANNED, FakeControl, chat_app, serper_app, web_backend

CONCURRENCY = 1000
# uvicorn closes idle connections after this; the clients keep theirs longer, so the pause makes them stale.
KEEPALIVE_S = 1
IDLE_S = 1.5
PROMPT = "User:{q}\nAssistant: <think>"


async def burst(call: Callable[[int], Awaitable[Any]], total: int, concurrency: int = CONCURRENCY) -> list[Any]:
    """`concurrency` callers share one client, each making its next call when the last returns."""
    results: list[Any] = [None] * total
    next_i = 0

    async def caller() -> None:
        nonlocal next_i
        while next_i < total:
            i = next_i
            next_i += 1
            results[i] = await call(i)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return results


async def burst_idle_burst(call: Callable[[int], Awaitable[Any]], first: int, second: int) -> list[Any]:
    results = await burst(call, first)
    await asyncio.sleep(IDLE_S)
    return results + await burst(lambda i: call(first + i), second)


def test_reward_client_2000_at_concurrency_1000_then_after_idle():
    records = [json.loads(line) for line in (FIXTURES / "r1searcher" / "hotpotqa_llama.jsonl").open()]
    spec = PRESETS["r1searcher-qwen-stage2"]
    samples = []
    for i in range(2500):
        r = records[i % len(records)]
        prompt = PROMPT.format(q=f"{i}. {r['question']}")
        samples.append((prompt + r["gen_text_store"], prompt, r["answer"]))
    expected = {
        (r["gen_text_store"], r["answer"]): score_solution(r["gen_text_store"], as_golds(r["answer"]), spec)
        for r in records
    }
    with serve(create_app(ServerSettings(spec=spec)), timeout_keep_alive=KEEPALIVE_S) as url:

        async def run():
            client = RewardClient(url, deadline_s=120)
            try:
                return await burst_idle_burst(lambda i: client.score(*samples[i]), 2000, 500)
            finally:
                await client.aclose()

        results = asyncio.run(run())
    for (query, prompt, label), got in zip(samples, results, strict=True):
        want = expected[(query[len(prompt) :], label)]
        assert (got.reward, got.score) == (want.reward, want.score)


class EchoBackend:
    """Passages that name the query they answer, so a mixed-up answer shows."""

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        return [[Passage(f"{q}#{k}", "echo", q, 1.0 - k / 10) for k in range(top_k)] for q in queries]

    async def aclose(self) -> None:
        return None


def test_search_client_2000_distinct_at_concurrency_1000_then_after_idle():
    config = ServerConfig(batching=True, cache_size=0, token="")
    queries = [f"distinct question number {i}" for i in range(2500)]
    with serve(create_search_app(config, backend=EchoBackend()), timeout_keep_alive=KEEPALIVE_S) as url:

        async def run():
            async with HttpSearchBackend(url, retries=3) as client:
                return await burst_idle_burst(lambda i: client.search([queries[i]], 2), 2000, 500)

        results = asyncio.run(run())
    for query, got in zip(queries, results, strict=True):
        assert [p.id for p in got[0]] == [f"{query}#0", f"{query}#1"]


def completions_echo_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/completions")
    async def complete(body: dict) -> dict:
        return {"choices": [{"text": f" echo {body['prompt']}", "finish_reason": "length"}]}

    return app


def _router(url: str) -> Any:
    models = [{"name": "small", "base_url": f"{url}/v1", "model": "small-model"}]
    return open_search_step(StageSearchConfig.model_validate({"backend": "router", "router": {"models": models}}))


@pytest.mark.parametrize("client", ["router", "web", "completions", "judge"])
def test_other_clients_1000_at_concurrency_1000_then_after_idle(client, tmp_path):
    first, second = 1000, 100
    if client == "router":
        app = chat_app(FakeControl(api_key=None), lambda messages: f"answer to {messages[-1]['content']}")
        make = _router

        def call(backend, i):
            return backend.search([f"small: question {i}"], 1)

        def right(i, got):
            return got[0][0].text == f"answer to question {i}"
    elif client == "web":
        app = serper_app(FakeControl())

        def make(url):
            return web_backend("serper", url, retries=3)

        def call(backend, i):
            return backend.search([f"query {i}"], 3)

        def right(i, got):
            return [p.id for p in got[0]] == [d.url for d in CANNED[:3]]
    elif client == "completions":
        app = completions_echo_app()

        def make(url):
            return OpenAICompletionsEngine(f"{url}/v1", "m", api_key_env="SEARCHRL_TEST_NO_KEY")

        async def call(engine, i):
            return (await engine.generate_batch([f"prompt {i}"], GenParams(max_tokens=4)))[0]

        def right(i, got):
            return got.text == f" echo prompt {i}" and got.finish_reason == "length"
    else:
        # Every verdict is a committed SQLite write, which costs more than the HTTP here; the judge keeps
        # at most 16 questions at its endpoint anyway, so fewer calls exercise the same.
        first, second = 300, 50
        app = chat_app(FakeControl(api_key=None), lambda messages: str("odd" in messages[-1]["content"]))

        def make(url):
            return LLMJudge(f"{url}/v1", "judge", tmp_path / "verdicts.sqlite", api_key_env="SEARCHRL_TEST_NO_KEY")

        def call(judge, i):
            return judge.judge(f"question {i}", ["gold"], "odd" if i % 2 else "even")

        def right(i, got):
            return got is bool(i % 2)

    with serve(app, timeout_keep_alive=KEEPALIVE_S) as url:

        async def run():
            backend = make(f"{url}")
            try:
                return await burst_idle_burst(lambda i: call(backend, i), first, second)
            finally:
                await backend.aclose()

        results = asyncio.run(run())
    assert len(results) == first + second
    assert [i for i, got in enumerate(results) if not right(i, got)] == []
