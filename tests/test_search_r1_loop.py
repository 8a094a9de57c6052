"""Search-R1's whole episode loop against ours, token for token. `run_llm_loop` ran from its own generation.py
(recorded by tests/fixtures/search_r1_oracle/record.py into loop.json, with a scripted policy and a scripted
`/retrieve`); the same scripted turns go here through OpenRLHF's agent loop (`MultiTurnAgentExecutor`, the stage's
agent file), the search-r1 protocol, the `retrieve` backend over a loopback server speaking `/retrieve` with the same
documents, and a real reward server. Compared: the prompt it trains on, every response token, which of them are
trained (its info mask against OpenRLHF's action ranges) and the queries searched. The recorded episodes cover its
turn cut (`_postprocess_responses`), `execute_predictions` (search, answer, invalid, empty search, both tags in one
turn, a search in the last turn), `_process_next_obs`, the start cut and the response cap, at train_grpo.sh's lengths
and at small ones that make every cut fire."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi import FastAPI

from reward_server.app import ServerSettings, create_app
from searchrl.rollout.agent import Runtime, load_agent_executor
from searchrl.rollout.engines import CompletionOutput, RequestOutput, SamplingParams
from searchrl.stage.config import load_stage
from tests.conftest import FIXTURES, ROOT, serve

LOOP = json.loads((FIXTURES / "search_r1_oracle/loop.json").read_text(encoding="utf-8"))
INPUTS = json.loads((FIXTURES / "search_r1_oracle/inputs.json").read_text(encoding="utf-8"))["loop"]
STAGE = ROOT / "configs/stages/search_r1.yaml"
CASES = [
    (setting, episode, recorded)
    for setting, runs in LOOP["runs"].items()
    for episode, recorded in zip(INPUTS["episodes"], runs, strict=True)
    if "skipped" not in recorded
]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ROOT / LOOP["tokenizer"])


def retrieve_app(corpus: dict[str, list[str]], asked: list[str]) -> FastAPI:
    """A server speaking Search-R1's `/retrieve` JSON with the recorded documents; it keeps the queries asked."""
    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve(body: dict[str, Any]) -> dict[str, Any]:
        asked.extend(body["queries"])
        hits = [
            [
                {"document": {"id": f"{q}#{i}", "contents": c}, "score": 1.0}
                for i, c in enumerate(corpus[q][: body["topk"]])
            ]
            for q in body["queries"]
        ]
        return {"result": hits}

    return app


@pytest.fixture(scope="module")
def servers():
    asked: list[str] = []
    stage, _ = load_stage(STAGE)
    with serve(retrieve_app(INPUTS["corpus"], asked)) as search_url:
        with serve(create_app(ServerSettings(spec=stage.reward))) as reward_url:
            yield search_url, reward_url, asked


class ScriptedEngine:
    """vLLM's `generate` for one episode: call i writes the script's i-th turn whatever its context, stopped at the
    first stop string as vLLM stops (the token that completes it kept) or at max_tokens. No EOS: Search-R1 decodes a
    turn without special tokens, so the scripts end without one (docs/OPTIONS.md: ours keeps a turn's EOS)."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.calls = tokenizer, turns, 0

    async def generate(self, prompt_token_ids, params, multi_modal_data=None):
        text = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        for n in range(1, min(len(ids), params.max_tokens) + 1):
            if any(stop in self.tokenizer.decode(ids[:n]) for stop in params.stop or []):
                return RequestOutput([CompletionOutput(ids[:n], self.tokenizer.decode(ids[:n]), "stop")])
        kept = ids[: params.max_tokens]
        return RequestOutput(
            [CompletionOutput(kept, self.tokenizer.decode(kept), "length" if len(ids) > len(kept) else "stop")]
        )


def our_settings(settings: dict[str, int]) -> list[str]:
    """Search-R1's lengths as this project's keys: OpenRLHF cuts the prompt to data.max_len - rollout.max_new_tokens
    tokens (its last ones, as the start cut keeps), and the rest holds every turn and observation at their caps."""
    turns, response, obs = settings["max_turns"], settings["max_response_length"], settings["max_obs_length"]
    new_tokens = (turns + 1) * response + turns * obs
    max_len = settings["max_start_length"] + new_tokens
    return [
        f"episode.max_turns={turns}", f"episode.max_searches={turns}", f"episode.top_k={settings['topk']}",
        f"episode.max_segment_tokens={response}", f"episode.max_observation_tokens={obs}",
        f"openrlhf.rollout.max_new_tokens={new_tokens}", f"openrlhf.data.max_len={max_len}",
    ]  # fmt: skip


def test_the_stages_lengths_are_search_r1s_as_its_grpo_script_sets_them():
    """The shipped stage needs no override: its episode and lengths are what our_settings derives from the recorded
    train_grpo.sh values, and those are the loop's own recorded setting."""
    recipe = json.loads((FIXTURES / "search_r1_oracle/recipe.json").read_text(encoding="utf-8"))["grpo"]["values"]
    settings = INPUTS["settings"]["train_grpo.sh"]
    for key in ("max_start_length", "max_prompt_length", "max_response_length", "max_obs_length"):
        assert settings[key] == recipe[f"data.{key}"]
    assert (settings["max_turns"], settings["topk"]) == (recipe["max_turns"], recipe["retriever.topk"])
    shipped, _ = load_stage(STAGE)
    derived, _ = load_stage(STAGE, our_settings(settings))
    assert shipped.episode == derived.episode and shipped.openrlhf == derived.openrlhf
    assert shipped.episode.max_observation_tokens == 500  # the protocol's default: the stage file does not set it


async def run(stage, tokenizer, episode: dict) -> dict:
    executor = load_agent_executor(ROOT / stage.stage / "agent_func.py")
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    try:
        flags = stage.openrlhf
        params = SamplingParams(temperature=0.0, max_tokens=flags["rollout.max_new_tokens"])
        engine = ScriptedEngine(tokenizer, episode["turns"])
        return await executor.execute(episode["prompt"], "Paris", params, flags["data.max_len"], tokenizer, engine)
    finally:
        Runtime.install(None)
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()


@pytest.mark.parametrize("setting,episode,recorded", CASES, ids=[f"{s}: {e['what']}" for s, e, _ in CASES])
def test_an_episode_is_search_r1s_own_token_for_token(setting, episode, recorded, servers, tokenizer):
    search_url, reward_url, asked = servers
    overrides = ["search.backend=retrieve", f"search.urls={search_url}", f"reward_server.urls={reward_url}"]
    stage, _ = load_stage(STAGE, [*overrides, "search.retries=0", *our_settings(INPUTS["settings"][setting])])
    asked.clear()
    result = asyncio.run(run(stage, tokenizer, episode))
    tokens, ranges = result["observation_tokens"], result["action_ranges"]
    start = ranges[0][0]
    trained = [int(any(a <= i < b for a, b in ranges)) for i in range(start, len(tokens))]
    assert tokenizer.decode(tokens[:start]) == recorded["prompt_text"]
    assert tokenizer.decode(tokens[start:]) == recorded["response_text"]
    assert tokens[:start] == recorded["prompt_ids"]
    assert tokens[start:] == recorded["response_ids"]
    assert trained == recorded["trained"]
    assert asked == recorded["searched"]
