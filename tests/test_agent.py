"""Episodes through OpenRLHF 0.11.2's own agent loop (openrlhf.utils.agent), a tiny transformer,
a real retrieval server over a real FAISS index, and a real reward server, all on loopback."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import torch

from reward_server.app import ServerSettings, create_app
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as create_search_app
from searchrl.process import free_port
from searchrl.protocols.r1_searcher import BEGIN_DOCS, END_QUERY
from searchrl.rollout.agent import Runtime, load_agent_executor
from searchrl.rollout.engines import HFEngine, ReplayEngine, SamplingParams, recorded_actions
from searchrl.rollout.reward_client import RewardServerError
from searchrl.stage.config import load_stage
from searchrl.stage.templates import render_prompt
from searchrl.tiny_policy.model import build_model, build_tokenizer
from tests.conftest import FIXTURES, ROOT, serve
from tests.test_search_fixtures import fixture_index

QUESTION = "Who carried out the 2009 Fort Hood shooting?"
SEARCH = "I should look this up. <|begin_of_query|> 2009 Fort Hood shooting <|end_of_query|>"
ANSWER = " The documents name the shooter. </think><answer> Nidal Hasan </answer>"


@pytest.fixture(scope="module")
def tokenizer():
    texts = [json.loads(line)["gen_text_store"] for line in (FIXTURES / "r1searcher/bamboogle_llama.jsonl").open()]
    return build_tokenizer(texts + [SEARCH, ANSWER, QUESTION])


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(len(tokenizer))


@pytest.fixture(scope="module")
def servers():
    stage, _ = load_stage(ROOT / "configs/stages/stage2_answer.yaml")
    with serve(create_search_app(ServerConfig(index_dir=fixture_index()))) as search_url:
        with serve(create_app(ServerSettings(spec=stage.reward))) as reward_url:
            yield search_url, reward_url


def stage_config(servers, *overrides: str):
    search_url, reward_url = servers
    stage, model_cfg = load_stage(
        ROOT / "configs/stages/stage2_answer.yaml",
        [f"search.urls={search_url}", f"reward_server.urls={reward_url}", "search.retries=0", *overrides],
    )
    return stage, model_cfg


class Script:
    """Steers the random model: segment i (the number of documents blocks so far, or what `turn` counts in the text
    after the prompt) is forced to `segments[i]` token by token, then EOS. The forward pass, sampling and stop
    handling are real."""

    def __init__(self, tokenizer, prompt: str, segments: list[str], turn=lambda observed: observed.count(BEGIN_DOCS)):
        self.tok = tokenizer
        self.turn = turn
        self.prompt_len = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        self.segments = [
            tokenizer(s, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for s in segments
        ]

    def __call__(self, prompt_token_ids: list[int]) -> list:
        observed = self.tok.decode(prompt_token_ids[self.prompt_len :])
        target = self.segments[min(self.turn(observed), len(self.segments) - 1)]
        start = len(prompt_token_ids)

        def force(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            pos = min(input_ids.shape[1] - start, len(target) - 1)
            forced = torch.full_like(scores, -float("inf"))
            forced[:, target[pos]] = 0.0
            return forced

        return [force]


async def run_episode(stage, model_cfg, tokenizer, engine, label="Nidal Hasan", max_length=4096):
    executor = load_agent_executor(ROOT / "stage2_answer/agent_func.py")
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    try:
        prompt = render_prompt(model_cfg, QUESTION)
        params = SamplingParams(temperature=0.0, max_tokens=None)
        result = await executor.execute(prompt, label, params, max_length, tokenizer, engine)
        return prompt, result
    finally:
        Runtime.install(None)
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()


def logs(result) -> dict[str, float]:
    return {k: float(v) for k, v in result["extra_logs"].items()}


def test_search_then_answer_through_openrlhf_loop(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers)
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, ANSWER]))
    prompt, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))

    tokens = result["observation_tokens"]
    ranges = result["action_ranges"]
    assert len(ranges) == 2  # one search segment, one answer segment
    text = tokenizer.decode(tokens)
    assert text.startswith(prompt) and text[len(prompt) :].count(BEGIN_DOCS) == 1
    first_action = tokenizer.decode(tokens[ranges[0][0] : ranges[0][1]])
    assert first_action.endswith(END_QUERY)  # the stop string is kept, and the search came right after it
    docs_id = tokenizer.convert_tokens_to_ids(BEGIN_DOCS)
    docs_positions = [i for i, t in enumerate(tokens) if t == docs_id]
    assert docs_positions and all(not (a <= i < b) for i in docs_positions for a, b in ranges)
    between = tokenizer.decode(tokens[ranges[0][1] : ranges[1][0]])
    assert between.startswith("\n\n<|begin_of_documents|>\n(1)") and "Hasan" in between

    got = logs(result)
    assert got["num_searches"] == 1.0 and got["search_errors"] == 0.0 and got["format_ok"] == 1.0
    # The reward in the result is the reward server's answer for that very text.
    _, reward_url = servers
    direct = httpx.post(
        f"{reward_url}/get_reward",
        json={"query": [text], "prompts": [prompt], "labels": ["Nidal Hasan"], "metadata": [{"num_searches": 1}]},
    ).json()
    assert result["reward"] == pytest.approx(direct["rewards"][0]) and result["reward"] == 1.0
    assert float(result["scores"]) == pytest.approx(direct["scores"][0])


def test_no_query_means_no_search(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers)
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [ANSWER]))
    _, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))
    assert len(result["action_ranges"]) == 1 and logs(result)["num_searches"] == 0.0
    assert result["reward"] == 1.0


def test_search_cap_ends_the_episode(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers, "episode.max_searches=1")
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, SEARCH, ANSWER]))
    _, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))
    got = logs(result)
    assert got["num_searches"] == 1.0 and got["search_capped"] == 1.0
    assert len(result["action_ranges"]) == 2
    assert result["reward"] == -2.0  # an unanswered query and no answer: format violated, no answer


def test_segment_cap_holds(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers, "episode.max_segment_tokens=6")
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, ANSWER]))
    _, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))
    assert all(b - a <= 6 for a, b in result["action_ranges"])
    assert result["truncated"] is True


def test_retrieval_server_down_finishes_with_failure_counted(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers, f"search.urls=http://127.0.0.1:{free_port()}")
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, ANSWER]))
    _, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))
    got = logs(result)
    assert got["search_errors"] == 1.0 and got["num_searches"] == 1.0
    assert "The search failed" in tokenizer.decode(result["observation_tokens"])
    assert result["reward"] == 1.0  # the episode went on and was scored


def test_reward_server_down_fails_loudly(servers, tokenizer, model):
    stage, model_cfg = stage_config(
        servers, f"reward_server.urls=http://127.0.0.1:{free_port()}", "reward_server.deadline_s=1"
    )
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [ANSWER]))
    with pytest.raises(RewardServerError, match="made-up rewards"):
        asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))


def test_agent_file_refuses_other_stage_config(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers, "stage=stage1_format")
    engine = HFEngine(model, tokenizer)
    with pytest.raises(Exception, match="stage2_answer/agent_func.py was given a config for stage1_format"):
        asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))


def test_replay_of_a_released_trajectory(servers, tokenizer):
    record = json.loads((FIXTURES / "r1searcher/bamboogle_llama.jsonl").open().readline())
    stage, model_cfg = stage_config(servers, "model=configs/models/qwen2.5-7b-base.yaml")
    prompt = render_prompt(model_cfg, QUESTION)
    engine = ReplayEngine(tokenizer, {prompt: record["gen_text_store"]})
    _, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine, label=record["answer"]))
    recorded_queries = len(recorded_actions(record["gen_text_store"])) - 1
    assert logs(result)["num_searches"] == recorded_queries >= 1
    assert len(result["action_ranges"]) == recorded_queries + 1
    assert logs(result)["has_answer"] == 1.0


def test_process_reward_is_a_share_of_the_way_up_when_the_gold_was_in_view(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers, "reward.process_weight=0.5")
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, ANSWER]))
    _, right = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))
    assert logs(right)["gold_hits"] == 1.0 and logs(right)["process_reward"] == 0.0
    assert right["reward"] == 1.0  # a right answer has nothing more to earn
    # The documents name Fort Hood, the answer does not: half the way from 0 to the best reward, 1.
    _, wrong = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine, label="Fort Hood"))
    assert logs(wrong)["gold_hits"] == 1.0 and wrong["reward"] == pytest.approx(0.5)
    assert float(wrong["scores"]) == 0.0  # the score for dynamic filtering stays the outcome's
    _, missed = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine, label="Somebody Else"))
    assert logs(missed)["gold_hits"] == 0.0 and missed["reward"] == 0.0


def test_with_options_off_nothing_changes(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers)
    assert stage.reward.process_weight == 0.0
    prompt = render_prompt(model_cfg, QUESTION)
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, ANSWER]))
    _, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))
    assert result["reward"] == 1.0 and "process_reward" not in result["extra_logs"]
    assert "efficiency_bonus" not in result["extra_logs"] and logs(result)["num_queries"] == 1.0


def test_efficiency_bonus_among_a_groups_correct_samples(servers, tokenizer, model):
    from searchrl.reward.components import efficiency_bonuses

    assert efficiency_bonuses([1, 2, 3, 1], [True, True, True, False], 0.6) == [0.6, 0.3, 0.0, 0.0]
    assert efficiency_bonuses([2, 2], [True, True], 0.6) == [0.0, 0.0]
    stage, model_cfg = stage_config(servers, "reward.efficiency_weight=0.5", "reward.efficiency_group_size=4")
    prompt = render_prompt(model_cfg, QUESTION)
    one = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, ANSWER]))
    two = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [SEARCH, SEARCH, ANSWER]))

    async def group(engines, timeout_s=None):
        executor = load_agent_executor(ROOT / "stage2_answer/agent_func.py")
        runtime = Runtime.from_stage(stage)
        if timeout_s is not None:
            runtime.terms.efficiency.timeout_s = timeout_s
        Runtime.install(runtime)
        try:
            params = SamplingParams(temperature=0.0, max_tokens=None)
            return await asyncio.gather(
                *(executor.execute(prompt, "Nidal Hasan", params, 4096, tokenizer, e) for e in engines)
            )
        finally:
            Runtime.install(None)
            await runtime.rewards.aclose()
            await runtime.environment.search.aclose()

    results = asyncio.run(group([one, two, one, two]))
    assert [logs(r)["num_searches"] for r in results] == [1.0, 2.0, 1.0, 2.0]
    assert [logs(r)["efficiency_bonus"] for r in results] == [0.5, 0.0, 0.5, 0.0]
    assert [r["reward"] for r in results] == [1.5, 1.0, 1.5, 1.0]
    # A group that never fills (two of four samples here) gets no bonus once the wait times out.
    partial = asyncio.run(group([one, two], timeout_s=1.0))
    assert [logs(r)["efficiency_bonus"] for r in partial] == [0.0, 0.0]


def test_routed_search_costs_are_charged_normalised_over_recent_episodes(servers, tokenizer, model):
    from searchrl.stage.search import StageSearchConfig
    from tests.fakes_web import FakeControl, chat_app

    def ask(name):
        return (
            "I will ask a model. <|begin_of_query|> " + name + ": who was the 2009 Fort Hood shooter? <|end_of_query|>"
        )

    control = FakeControl(api_key=None)
    with serve(chat_app(control, answer="The shooter was Nidal Hasan.")) as llm:
        models = [
            {"name": "small", "base_url": f"{llm}/v1", "model": "m", "price_per_1k_completion": 1.0},
            {"name": "big", "base_url": f"{llm}/v1", "model": "m", "price_per_1k_completion": 4.0},
        ]
        from searchrl.reward.spec import RewardSpec

        stage, model_cfg = stage_config(servers)
        # The cost penalty, the routing reward's named alternative, charges every episode (the agent's part).
        penalty = RewardSpec(formula="router_r1", cost_weight=0.5, cost_shape="penalty", cost_window=256)
        search = StageSearchConfig.model_validate({"backend": "router", "router": {"models": models}})
        stage = stage.model_copy(update={"search": search, "reward": penalty})
        prompt = render_prompt(model_cfg, QUESTION)
        executor = load_agent_executor(ROOT / "stage2_answer/agent_func.py")

        async def two_episodes():
            runtime = Runtime.from_stage(stage)
            Runtime.install(runtime)
            try:
                params = SamplingParams(temperature=0.0, max_tokens=None)
                out = []
                for name in ("big", "small"):
                    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [ask(name), ANSWER]))
                    out.append(await executor.execute(prompt, "Nidal Hasan", params, 4096, tokenizer, engine))
                return out
            finally:
                Runtime.install(None)
                await runtime.rewards.aclose()
                await runtime.environment.search.aclose()

        big, small = asyncio.run(two_episodes())
    assert "The shooter was Nidal Hasan." in tokenizer.decode(big["observation_tokens"])
    assert logs(big)["search_cost"] == pytest.approx(0.04) and logs(small)["search_cost"] == pytest.approx(0.01)
    assert logs(big)["cost_penalty"] == pytest.approx(0.5)  # the most expensive so far: the full weight
    assert logs(small)["cost_penalty"] == pytest.approx(0.125)  # a quarter of the recent maximum
    assert big["reward"] == pytest.approx(0.5) and small["reward"] == pytest.approx(0.875)


def test_multi_query_block_through_the_openrlhf_loop(servers, tokenizer, model):
    stage, model_cfg = stage_config(servers, "episode.max_queries_per_block=2")
    prompt = render_prompt(model_cfg, QUESTION)
    multi = "Two things to look up. <|begin_of_query|> 2009 Fort Hood shooting || Nidal Hasan <|end_of_query|>"
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [multi, ANSWER]))
    _, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, engine))
    got = logs(result)
    assert got["num_searches"] == 1.0 and got["num_queries"] == 2.0 and got["format_ok"] == 1.0
    text = tokenizer.decode(result["observation_tokens"])[len(prompt) :]
    assert "(1)Query: 2009 Fort Hood shooting\nDoc 1: " in text and "(2)Query: Nidal Hasan\nDoc 1: " in text
    assert result["reward"] == 1.0


def test_several_queries_a_search_in_r1_searchers_tags(servers, tokenizer, model):
    """RAG-R1's multi-query search on R1-Searcher's tags (the rag_r1 stage speaks RAG-R1's own: test_rag_r1_protocol):
    each query and its own documents, grouped in one documents block."""
    search_url, reward_url = servers
    overrides = [f"search.urls={search_url}", f"reward_server.urls={reward_url}", "search.retries=0"]
    multi = ["episode.max_queries_per_block=3", "episode.query_separator=','", "episode.max_tokens_per_query=40"]
    stage, base = load_stage(ROOT / "configs/stages/stage2_answer.yaml", [*overrides, *multi])
    assert (stage.protocol, stage.episode.max_queries_per_block, stage.episode.query_separator) == (
        "r1-searcher",
        3,
        ",",
    )
    prompt = render_prompt(base, QUESTION)
    four = "Look up four. <|begin_of_query|> 2009 Fort Hood shooting, Nidal Hasan, Fort Hood, Killeen <|end_of_query|>"
    engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, [four, ANSWER]))
    _, result = asyncio.run(run_episode(stage, base, tokenizer, engine))
    got = logs(result)
    assert got["num_searches"] == 1.0 and got["num_queries"] == 3.0 and result["reward"] == 1.0  # RAG-R1's limit: 3
    block = tokenizer.decode(result["observation_tokens"])[len(prompt) :].split("<|begin_of_documents|>\n")[1]
    groups = block.split("<|end_of_documents|>")[0].split("\n(")
    assert [g.split("\n", 1)[0].split(")", 1)[-1] for g in groups] == [
        "Query: 2009 Fort Hood shooting",
        "Query: Nidal Hasan",
        "Query: Fort Hood",
    ]
    for group in groups:  # each query's documents cut to 40 tokens on their own, none crowded out
        docs = group.split("\n", 1)[1]
        assert docs.startswith("Doc 1: ") and 30 < len(tokenizer(docs.strip())["input_ids"]) <= 41
