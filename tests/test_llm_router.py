"""LLM routing as a search backend, against loopback OpenAI-compatible servers."""

import asyncio

import pytest

from rollout.backends import StageSearchConfig, open_backend
from search_backend.base import SearchError
from tests.conftest import serve
from tests.fakes_web import FakeControl, chat_app

# The fakes report 10 prompt and 10 completion tokens per answer.
PRICES = {"small": (0.1, 0.2), "big": (1.0, 3.0)}


def answer_as(name):
    return lambda messages: f"{name} says: the answer to '{messages[-1]['content']}'"


def router_config(urls, retries=1):
    models = [
        {
            "name": n,
            "base_url": f"{urls[n]}/v1",
            "model": f"{n}-model",
            "price_per_1k_prompt": PRICES[n][0],
            "price_per_1k_completion": PRICES[n][1],
        }
        for n in urls
    ]
    return StageSearchConfig.model_validate({"backend": "router", "router": {"models": models, "retries": retries}})


def test_questions_go_to_the_named_model_in_parallel_with_their_cost():
    small, big = FakeControl(api_key=None), FakeControl(api_key=None)
    with serve(chat_app(small, answer_as("small"))) as s, serve(chat_app(big, answer_as("big"))) as b:
        backend = open_backend(router_config({"small": s, "big": b}))

        async def run():
            try:
                return await backend.search(
                    [
                        "small: who shot people at Fort Hood?",
                        "big : capital of France",
                        "nobody: anything",
                        "no colon at all",
                    ],
                    3,
                )
            finally:
                await backend.aclose()

        results = asyncio.run(run())
    assert [len(r) for r in results] == [1, 1, 1, 1]
    first, second = results[0][0], results[1][0]
    assert first.title == "small" and first.text == "small says: the answer to 'who shot people at Fort Hood?'"
    assert second.title == "big" and second.text.startswith("big says: the answer to 'capital of France'")
    assert first.cost == pytest.approx((10 * 0.1 + 10 * 0.2) / 1000)
    assert second.cost == pytest.approx((10 * 1.0 + 10 * 3.0) / 1000)
    assert "one of: small, big" in results[2][0].text and results[3][0].cost == 0.0
    assert small.calls == 1 and big.calls == 1
    assert small.requests[0].json["model"] == "small-model"


def test_a_failing_model_is_retried_then_a_typed_error():
    flaky = FakeControl(api_key=None, script=["500", "ok"])
    down = FakeControl(api_key=None, mode="500")
    with serve(chat_app(flaky, answer_as("small"))) as s, serve(chat_app(down, answer_as("big"))) as b:
        backend = open_backend(router_config({"small": s, "big": b}))

        async def run():
            try:
                assert (await backend.search(["small: q"], 1))[0][0].text.startswith("small says")
                with pytest.raises(SearchError, match="big: .*HTTP 500.*after 2 tries"):
                    await backend.search(["big: q"], 1)
            finally:
                await backend.aclose()

        asyncio.run(run())
    assert flaky.calls == 2 and down.calls == 2


def test_router_section_is_required():
    with pytest.raises(ValueError, match="search.router: required"):
        open_backend(StageSearchConfig(backend="router"))
