"""Search-R1's protocol as a stage's configuration: its prompt, stop strings, documents block, invalid-action answer
and turn limit, through OpenRLHF 0.11.2's own agent loop with a tiny transformer, a real retrieval server over a real
FAISS index and a real reward server scoring Search-R1's exact match; and the config and preflight keeping one
protocol per run."""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager

import httpx
import pytest

from reward_server.app import ServerSettings, create_app
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as create_search_app
from searchrl.config import ConfigError
from searchrl.job.preflight import check_servers
from searchrl.protocols import PROTOCOL_NAMES, PROTOCOLS, TagProtocol, get_protocol, r1_searcher, search_r1
from searchrl.rollout.agent import Runtime, load_agent_executor
from searchrl.rollout.engines import HFEngine, SamplingParams, recorded_actions
from searchrl.search.base import Passage
from searchrl.stage.config import load_stage
from searchrl.stage.templates import effective_model, prompt_end, render_prompt
from searchrl.tiny_policy.model import build_model, build_tokenizer
from tests.conftest import FIXTURES, ROOT, serve
from tests.test_agent import Script
from tests.test_search_fixtures import fixture_index

STAGE = ROOT / "configs/stages/search_r1.yaml"
BASE_MODEL = "model=configs/models/qwen2.5-7b-base.yaml"
# The fixture tokenizer spends about three times Qwen's tokens on a passage, so three of them pass the protocol's
# 500-token observation cut; these tests read whole blocks (the cut's own test: tests/test_search_r1_loop.py).
UNCUT = "episode.max_observation_tokens=4096"
QUESTION = "Who carried out the 2009 Fort Hood shooting?"
SEARCH = "<think>I should look this up.</think>\n<search> 2009 Fort Hood shooting </search>"
ANSWER = "<think>The documents name the shooter.</think>\n<answer> Nidal Hasan </answer>"
RAMBLE = "<think>I am not sure what to do here.</think>"


@pytest.fixture(scope="module")
def tokenizer():
    texts = [json.loads(line)["gen_text_store"] for line in (FIXTURES / "r1searcher/bamboogle_llama.jsonl").open()]
    return build_tokenizer(texts + [SEARCH, ANSWER, RAMBLE, QUESTION, search_r1.PROMPT, search_r1.INVALID_ACTION])


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(len(tokenizer))


@contextmanager
def stage_servers(path=STAGE, *overrides: str):
    """A retrieval server over the fixture index and a reward server scoring the stage's reward."""
    stage, _ = load_stage(path, overrides)
    with serve(create_search_app(ServerConfig(index_dir=fixture_index()))) as search_url:
        with serve(create_app(ServerSettings(spec=stage.reward))) as reward_url:
            yield search_url, reward_url


@pytest.fixture(scope="module")
def servers():
    with stage_servers() as urls:
        yield urls


def stage_config(servers, *overrides: str, path=STAGE):
    search_url, reward_url = servers
    stage, model_cfg = load_stage(
        path, [BASE_MODEL, f"search.urls={search_url}", f"reward_server.urls={reward_url}", "search.retries=0",
               UNCUT, *overrides],
    )  # fmt: skip
    return stage, effective_model(model_cfg, stage)


def search_r1_turn(observed: str) -> int:
    """Search-R1's turns so far: documents blocks plus invalid-action answers."""
    return observed.count(search_r1.DOCUMENTS_OPEN) + observed.count(search_r1.INVALID_ACTION.strip())


async def run_episode(stage, model_cfg, tokenizer, model, segments, label="Nidal Hasan"):
    executor = load_agent_executor(ROOT / stage.stage / "agent_func.py")
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    try:
        prompt = render_prompt(model_cfg, QUESTION, prompt_end=prompt_end(stage))
        engine = HFEngine(model, tokenizer, steer=Script(tokenizer, prompt, segments, search_r1_turn))
        params = SamplingParams(temperature=0.0, max_tokens=None)
        result = await executor.execute(prompt, label, params, 4096, tokenizer, engine)
        return prompt, result
    finally:
        Runtime.install(None)
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()


def episode_runner(servers, tokenizer, model, path=STAGE):
    """Runs one scripted episode of the stage through OpenRLHF's loop: (prompt, result, text, logs)."""

    def run(segments: list[str], *overrides: str):
        stage, model_cfg = stage_config(servers, *overrides, path=path)
        prompt, result = asyncio.run(run_episode(stage, model_cfg, tokenizer, model, segments))
        text = tokenizer.decode(result["observation_tokens"])
        return prompt, result, text, {k: float(v) for k, v in result["extra_logs"].items()}

    return run


@pytest.fixture
def episode(servers, tokenizer, model):
    return episode_runner(servers, tokenizer, model)


def test_the_prompt_is_search_r1s_instruction_as_its_data_script_writes_it():
    recorded = json.loads((FIXTURES / "search_r1/reward_cases.json").read_text(encoding="utf-8"))["prompts"]
    stage, model_cfg = load_stage(STAGE, [BASE_MODEL])
    base = render_prompt(effective_model(model_cfg, stage), "What is the capital of France?", prompt_end=None)
    assert base == recorded["base"]  # make_prefix's text, byte for byte
    chat = effective_model(load_stage(STAGE)[1], stage)
    assert chat.kind == "chat" and chat.system is None and chat.user == search_r1.PROMPT and not chat.assistant_prefix


def test_a_search_then_an_answer_through_openrlhf_loop_is_paid_what_the_reward_server_pays(episode, servers):
    prompt, result, text, logs = episode([SEARCH, ANSWER])
    ranges = result["action_ranges"]
    assert len(ranges) == 2
    first = text[len(prompt) :]
    assert first.startswith(SEARCH)  # generation stopped at </search> and the search ran right after it
    block = first[len(SEARCH) :]
    assert block.startswith("\n\n<information>Doc 1(Title: ") and "</information>\n\n" in block
    assert block.count("\nDoc ") == 2  # top-3: Doc 1 opens the block, Doc 2 and Doc 3 follow on their own lines
    assert logs["num_searches"] == 1.0 and logs["invalid_actions"] == 0.0
    _, reward_url = servers
    direct = httpx.post(
        f"{reward_url}/get_reward",
        json={"query": [text], "prompts": [prompt], "labels": ["Nidal Hasan"], "metadata": [{"num_searches": 1}]},
    ).json()
    assert result["reward"] == pytest.approx(direct["rewards"][0]) == 1.0


def test_a_turn_that_neither_searches_nor_answers_is_told_so_and_the_episode_goes_on(episode):
    prompt, result, text, logs = episode([RAMBLE, ANSWER])
    # The turn's own EOS stays in the context here (OpenRLHF keeps an action's tokens as generated); Search-R1
    # decodes a turn without it and tokenizes the text again (docs/OPTIONS.md).
    assert text[len(prompt) :].replace("</s>", "") == RAMBLE + search_r1.INVALID_ACTION + ANSWER
    assert logs["invalid_actions"] == 1.0 and logs["num_searches"] == 0.0
    assert result["reward"] == 1.0  # Search-R1 pays the answer alone; the invalid turn costs only a turn


def test_the_last_turn_is_generated_without_search(episode):
    """max_turns 2: two turns search, the third's query is not run and the episode ends there."""
    prompt, result, text, logs = episode([SEARCH, SEARCH, SEARCH, ANSWER])
    assert text[len(prompt) :].count("<information>") == 2 and text.endswith("</search>")
    assert logs["num_searches"] == 2.0 and logs["search_capped"] == 1.0
    assert result["reward"] == 0.0
    # An invalid turn counts as a turn: one ramble and one search leave the third turn without search.
    prompt, result, text, logs = episode([RAMBLE, SEARCH, SEARCH])
    assert logs["invalid_actions"] == 1.0 and logs["num_searches"] == 1.0 and logs["search_capped"] == 1.0


def test_every_protocol_offers_the_interface_and_r1_searchers_blocks_are_unchanged():
    assert set(PROTOCOLS) == set(PROTOCOL_NAMES) == {"r1-searcher", "search-r1", "rag-r1", "router-r1", "tool-call"}
    members = [m for m in TagProtocol.__dict__ if not m.startswith("_")] + list(TagProtocol.__annotations__)
    for name, protocol in PROTOCOLS.items():
        assert protocol.NAME == name and get_protocol(name) is protocol
        assert all(hasattr(protocol, m) for m in members), [m for m in members if not hasattr(protocol, m)]
    passage = Passage("7", "Paris", "Paris is the capital of France.", 1.0)
    entry = r1_searcher.passage_entry(passage)
    assert r1_searcher.documents_block([entry], "q <|end_of_query|>") == r1_searcher.format_documents([entry], "q")
    assert r1_searcher.stops(False) == [r1_searcher.END_QUERY]
    assert search_r1.stops(False) == ["</search>"] and search_r1.stops(True) == ["</search>", "</answer>"]
    assert search_r1.render_documents([passage]) == (
        '\n\n<information>Doc 1(Title: "Paris") Paris is the capital of France.</information>\n\n'
    )
    with pytest.raises(ValueError, match="not one of r1-searcher, search-r1, rag-r1, router-r1, tool-call"):
        get_protocol("search_r1")


def test_a_recorded_r1_searcher_trajectory_replays_in_search_r1s_tags_and_is_scored_as_search_r1_scores_it():
    from searchrl.reward.search_r1 import em

    record = json.loads((FIXTURES / "r1searcher/bamboogle_llama.jsonl").open().readline())
    translated = search_r1.from_r1_searcher(record["gen_text_store"])
    for tag in (r1_searcher.BEGIN_QUERY, r1_searcher.BEGIN_DOCS, r1_searcher.END_QUERY):
        assert tag not in translated
    segments = recorded_actions(translated, search_r1)
    assert [search_r1.action(s)[0] for s in segments] == ["search"] * (len(segments) - 1) + ["answer"]
    answer = search_r1.action(segments[-1])[1]
    assert answer == r1_searcher.extract_answer(record["gen_text_store"])
    # Scored on the whole sequence as Search-R1's trainer decodes it: the prompt's two examples, then the answer.
    prompt = search_r1.PROMPT.replace("{question}", record["question"])
    assert em(prompt + translated, [answer]) == 1.0
    assert em(prompt + translated, ["not the answer"]) == 0.0


def test_one_protocol_per_run_in_the_config():
    with pytest.raises(ConfigError, match="protocol: search-r1, and reward.protocol is r1-searcher: set"):
        load_stage(ROOT / "configs/stages/stage2_answer.yaml", ["protocol=search-r1"])
    with pytest.raises(ConfigError, match="episode.max_turns: protocol search-r1 goes on after an invalid turn"):
        load_stage(ROOT / "configs/stages/stage2_answer.yaml", ["protocol=search-r1", "reward.protocol=search-r1"])
    with pytest.raises(ConfigError, match="reward.formula router_r1 reads r1-searcher's tags"):
        load_stage(STAGE, ["reward.formula=router_r1"])
    with pytest.raises(ConfigError, match="protocol: r1-searcher, and reward.formula search_r1_em reads search-r1"):
        load_stage(STAGE, ["protocol=r1-searcher", "episode.max_turns=null"])
    with pytest.raises(ConfigError, match="episode.max_turns: Search-R1's turn limit"):
        load_stage(ROOT / "configs/stages/stage2_answer.yaml", ["episode.max_turns=2"])
    with pytest.raises(ConfigError, match="max_queries_per_block: protocol search-r1 takes one query a search"):
        load_stage(STAGE, ["episode.max_queries_per_block=3"])
    with pytest.raises(
        ConfigError, match="protocol: Input should be 'r1-searcher', 'search-r1', 'rag-r1', 'router-r1' or 'tool-call'"
    ):
        load_stage(STAGE, ["protocol=searchr1"])
    stage, _ = load_stage(STAGE)
    assert stage.protocol == "search-r1" and stage.episode.top_k == 3 and stage.episode.max_turns == 2
    assert stage.openrlhf["algo.advantage.estimator"] == "group_norm" and stage.openrlhf["actor.entropy_coef"] == 0.001


def test_the_preflight_refuses_a_reward_server_that_reads_another_protocol(tmp_path):
    r1_stage, _ = load_stage(ROOT / "configs/stages/stage2_answer.yaml")
    with serve(create_app(ServerSettings(spec=r1_stage.reward))) as reward_url:
        stage, _ = load_stage(STAGE, [f"reward_server.urls={reward_url}", "search.backend=web"])
        checks = {c.name: c for c in check_servers(stage, tmp_path)}
    assert not checks["reward server protocol"].ok
    assert "reads r1-searcher's tags; this stage speaks search-r1" in checks["reward server protocol"].detail
    assert not checks["reward spec equal"].ok


def test_retrieve_takes_a_whole_turn_of_search_r1s_grpo_trainer_in_one_post(servers):
    """512 prompts x 5 samples: 2,560 queries in one POST pass the count limit (the request fails on its top-k,
    checked after the count, so nothing is searched); over the limit, the error names the field and the limit."""
    queries = [f"query number {i}" for i in range(2560)]
    url, _ = servers
    turn = httpx.post(f"{url}/retrieve", json={"queries": queries, "topk": 0}, timeout=60)
    over = httpx.post(f"{url}/retrieve", json={"queries": queries * 2, "topk": 3}, timeout=60)
    assert turn.status_code == 422 and turn.json()["field"] == "topk", turn.json()
    assert over.status_code == 422 and over.json()["field"] == "queries"
    assert "5120 queries is over the limit of 4096" in over.json()["detail"]


def test_search_r1s_published_parquet_becomes_prompts_in_its_protocol(tmp_path):
    """Rows as Search-R1's nq_search.py writes them (verl: prompt, reward_model.ground_truth.target, data_source),
    read from a local parquet file and rendered with its instruction; the golds and the data source are kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stage2_answer.prepare_data import search_r1_main

    questions = [
        ("who wrote the hobbit?", ["J. R. R. Tolkien", "Tolkien"], "nq"),
        ("capital of peru?", ["Lima"], "hotpotqa"),
    ]
    rows = [
        {
            "data_source": source,
            "prompt": [{"role": "user", "content": search_r1.PROMPT.replace("{question}", q)}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": golds}},
            "extra_info": {"split": "train", "index": i},
        }
        for i, (q, golds, source) in enumerate(questions)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    out = tmp_path / "search_r1.jsonl"
    args = [
        "--input",
        str(tmp_path / "train.parquet"),
        "--out",
        str(out),
        "--model",
        "configs/models/qwen2.5-7b-base.yaml",
    ]
    assert search_r1_main(args) == 0
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [g["prompt"] for g in got] == [search_r1.PROMPT.replace("{question}", q) for q, _, _ in questions]
    assert [json.loads(g["label"]) if g["label"].startswith("[") else [g["label"]] for g in got] == [
        golds for _, golds, _ in questions
    ]
    assert [g["data_source"] for g in got] == [g["datasource"] for g in got] == ["nq", "hotpotqa"]
    # --steps: exactly steps x prompts-per-step prompts, pass after shuffled pass (each question 3 or 4 times here).
    stepped = tmp_path / "stepped.jsonl"
    assert (
        search_r1_main([*args[:2], "--out", str(stepped), *args[4:], "--steps", "7", "--prompts-per-step", "1"]) == 0
    )
    drawn = [json.loads(line)["question"] for line in stepped.read_text(encoding="utf-8").splitlines()]
    assert len(drawn) == 7 and sorted(drawn.count(q) for q, _, _ in questions) == [3, 4]
    assert all(set(drawn[i : i + 2]) == {q for q, _, _ in questions} for i in (0, 2, 4))  # each pass whole
    report = json.loads(stepped.with_suffix(".report.json").read_text())
    assert report["written"] == 7 and report["steps"] == {"steps": 7, "prompts_per_step": 1, "questions": 2}
    rows[1]["reward_model"] = {"style": "rule"}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "broken.parquet")
    assert search_r1_main(["--input", str(tmp_path / "broken.parquet"), "--out", str(out)]) == 2


def test_a_published_rows_own_prompt_is_kept_unless_rebuilt(tmp_path, chat_model):
    """A verl row with an instruction of its own and a system turn: `data prepare search_r1` renders its messages
    through the chat template as Search-R1's data loader does (they were replaced by its rebuilt instruction before);
    `--rebuild-prompt` rebuilds it from the question."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stage2_answer.prepare_data import search_r1_main

    messages = [
        {"role": "system", "content": "You are a careful researcher."},
        {
            "role": "user",
            "content": "Search with <search> q </search>, answer in <answer>.\nQuestion: capital of peru?",
        },
    ]
    row = {"data_source": "custom", "prompt": messages, "reward_model": {"ground_truth": {"target": ["Lima"]}}}
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "train.parquet")
    out = tmp_path / "out.jsonl"
    base = ["--input", str(tmp_path / "train.parquet"), "--model", str(chat_model)]
    assert search_r1_main([*base, "--out", str(out)]) == 0
    kept = json.loads(out.read_text(encoding="utf-8"))["prompt"]
    assert kept.startswith("<|im_start|>system\nYou are a careful researcher.<|im_end|>")
    assert "answer in <answer>.\nQuestion: capital of peru?<|im_end|>\n<|im_start|>assistant\n" in kept
    assert json.loads(out.with_suffix(".report.json").read_text())["own_prompts"] == 1
    assert search_r1_main([*base, "--out", str(out), "--rebuild-prompt"]) == 0
    rebuilt = json.loads(out.read_text(encoding="utf-8"))["prompt"]
    assert (
        "careful researcher" not in rebuilt and search_r1.PROMPT.replace("{question}", "capital of peru?") in rebuilt
    )


def test_the_retrieve_backend_finds_through_retrieve_what_the_http_backend_finds_through_search(servers):
    """`search.backend: retrieve` speaks Search-R1's `/retrieve` (here to this project's server, which speaks it too):
    the same passages, titles and scores as `/search` gives, a whole GRPO turn (2,560 queries) in one call, and an
    empty query answered (the dense index embeds it, as Search-R1's retriever does)."""
    from searchrl.search.http_client import HttpSearchBackend
    from searchrl.search.retrieve import RetrieveBackend

    url, _ = servers
    queries = [f"{topic} {i}" for i in range(512) for topic in ("Fort Hood shooting", "", "capital of France",
                                                              "Nidal Hasan", "army psychiatrist")]  # fmt: skip

    async def both():
        async with RetrieveBackend(url, retries=0) as retrieve, HttpSearchBackend(url, retries=0) as search:
            return await retrieve.search(queries, 3), await search.search(queries[:50], 3)

    through_retrieve, through_search = asyncio.run(both())
    assert len(queries) == 2560 and len(through_retrieve) == 2560
    assert through_retrieve[:50] == through_search
    assert all(len(hits) == 3 for hits in through_retrieve)
