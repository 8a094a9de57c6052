"""LLM routing as a search backend, against loopback OpenAI-compatible servers."""

import asyncio

import pytest

from searchrl.rollout.search_step import open_search_step
from searchrl.search.base import SearchError
from searchrl.stage.search import StageSearchConfig
from tests.conftest import ROOT, serve
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
        backend = open_search_step(router_config({"small": s, "big": b}))

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
        backend = open_search_step(router_config({"small": s, "big": b}))

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
        open_search_step(StageSearchConfig(backend="router"))


def test_router_r1_naming_picks_models_by_the_words_of_the_name():
    from searchrl.routing.names import pick
    from searchrl.stage.config import load_stage

    pool = load_stage(ROOT / "configs/stages/router_r1.yaml")[0].search.router
    assert pool is not None and pool.naming == "router_r1"
    picked = {w: getattr(pick(w, pool.models, "router_r1"), "model", None) for w in (
        "LLaMA-3.1-70B-Instruct", "llama-3.1-70b", "Llama 70B", "llama-3.1-8b", "LLaMA-3.1-8B-Instruct",
        "Qwen", "qwen2.5-7b-instruct", "Mistral-7B-Instruct", "mixtral", "Gemma-2-27B-Instruct",
        "llama", "GPT-4o", "Gemini",
    )}  # fmt: skip
    assert picked == {
        "LLaMA-3.1-70B-Instruct": "meta/llama-3.1-70b-instruct",
        "llama-3.1-70b": "meta/llama-3.1-70b-instruct",
        "Llama 70B": "meta/llama-3.1-70b-instruct",
        "llama-3.1-8b": "meta/llama-3.1-8b-instruct",
        "LLaMA-3.1-8B-Instruct": "meta/llama-3.1-8b-instruct",
        "Qwen": "qwen/qwen2.5-7b-instruct",
        "qwen2.5-7b-instruct": "qwen/qwen2.5-7b-instruct",
        "Mistral-7B-Instruct": "mistralai/mistral-7b-instruct-v0.3",
        "mixtral": "mistralai/mixtral-8x22b-instruct-v0.1",
        "Gemma-2-27B-Instruct": "google/gemma-2-27b-it",
        "llama": None,  # a family without a size is no model, as in the original's check_llm_name
        "GPT-4o": None,
        "Gemini": None,
    }
    assert pick("LLaMA-3.1-70B-Instruct", pool.models, "exact").name == "LLaMA-3.1-70B-Instruct"
    assert pick("llama-3.1-70b", pool.models, "exact") is None


def test_router_r1_pool_sends_the_framing_and_sampling_and_answers_unknown_names_with_none():
    from searchrl.routing.llm_router import UNROUTED, LLMRouterBackend
    from searchrl.routing.loopback_pool import repoint
    from searchrl.stage.config import load_stage

    control = FakeControl(api_key=None)
    with serve(chat_app(control, lambda messages: "It was Nidal Hasan.")) as url:
        pool = repoint(load_stage(ROOT / "configs/stages/router_r1.yaml")[0].search.router, f"{url}/v1")
        backend = LLMRouterBackend(pool)

        async def run():
            try:
                return await backend.search(
                    ["Gemma-2-27B-Instruct: Who shot people at Fort Hood?", "GPT-9: who?", "LLM-Name:Your-Query"], 1
                )
            finally:
                await backend.aclose()

        found = asyncio.run(run())
    assert [hits[0].text for hits in found] == ["It was Nidal Hasan.", "None", "None"]
    assert [hits[0].id for hits in found[1:]] == [UNROUTED, UNROUTED] and found[0][0].cost == pytest.approx(10 * 8e-7)
    (sent,) = [r.json for r in control.requests]  # unknown names and placeholders are never sent
    assert sent["model"] == "google/gemma-2-27b-it" and len(sent["messages"]) == 1
    assert sent["messages"][0]["role"] == "user" and sent["messages"][0]["content"].endswith(
        "The sub-question:\nWho shot people at Fort Hood?"
    )
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["max_tokens"]) == (0.1, 1.0, 42, 512)


def test_the_environment_reports_unrouted_queries_to_the_reward_server():
    from searchrl.rollout.environment import Episode, SearchEnvironment
    from searchrl.routing.llm_router import UNROUTED
    from searchrl.search.base import Passage
    from searchrl.stage.config import EpisodeConfig

    class Pool:
        async def search(self, queries, top_k):
            return [[Passage(id=UNROUTED if "GPT" in q else "m", title="", text="x", score=0.0)] for q in queries]

    env = SearchEnvironment(Pool(), EpisodeConfig(top_k=1))
    ep = Episode(prompt="p", label="a")
    for action in ("<|begin_of_query|> GPT-9: q <|end_of_query|>", "<|begin_of_query|> Qwen: q <|end_of_query|>"):
        asyncio.run(env.step(ep, action))
    assert ep.metadata()["unknown_models"] == 1
