"""RAG-R1's protocol, the `rag_r1` stage's default: several queries in one `<search> q1,q2 </search>`, each query's
documents in one `<information>` JSON block as RAG-R1's generation_mq.py writes it, four turns then a last one without
search, and its reward (Search-R1's exact match on the whole sequence), through OpenRLHF 0.11.2's own agent loop with
a tiny transformer, a real retrieval server and a real reward server."""

from __future__ import annotations

import json

import pytest

from searchrl.config import ConfigError
from searchrl.protocols import get_protocol, rag_r1
from searchrl.search.base import Passage
from searchrl.stage.config import load_stage
from searchrl.tiny_policy.model import build_model, build_tokenizer
from tests.conftest import FIXTURES, ROOT
from tests.test_search_r1_protocol import episode_runner, stage_servers

STAGE = ROOT / "configs/stages/rag_r1.yaml"
BASE_MODEL = "model=configs/models/qwen2.5-7b-base.yaml"
QUESTION = "Who carried out the 2009 Fort Hood shooting?"
FOUR = "<think>Look up four.</think>\n<search> 2009 Fort Hood shooting, Nidal Hasan,Fort Hood, Killeen </search>"
ANSWER = "<think>The documents name the shooter.</think>\n<answer> Nidal Hasan </answer>"


@pytest.fixture(scope="module")
def tokenizer():
    texts = [json.loads(line)["gen_text_store"] for line in (FIXTURES / "r1searcher/bamboogle_llama.jsonl").open()]
    prompt = load_stage(STAGE)[0].prompt
    return build_tokenizer(texts + [FOUR, ANSWER, QUESTION, prompt.base, '{"query": [], "documents": []}'])


@pytest.fixture(scope="module")
def servers():
    with stage_servers(STAGE) as urls:
        yield urls


@pytest.fixture(scope="module")
def episode(servers, tokenizer):
    return episode_runner(servers, tokenizer, build_model(len(tokenizer)), STAGE)


def test_several_queries_in_one_search_come_back_as_rag_r1s_json_block(episode, tokenizer):
    prompt, result, text, logs = episode([FOUR, ANSWER], "episode.max_tokens_per_query=40")
    assert 'write up to 3 short queries separated by ","' in prompt and prompt.endswith(f"Question: {QUESTION}\n")
    first = text[len(prompt) :]
    assert first.startswith(FOUR)
    block = first[len(FOUR) :]
    assert block.startswith("\n<information>\n{\n") and "\n}\n</information>\n" in block
    body = json.loads(block[len("\n<information>\n") : block.index("\n</information>\n")])
    # Split on the separator, stripped, the first three searched (RAG-R1's prompt says three).
    assert body["query"] == ["2009 Fort Hood shooting", "Nidal Hasan", "Fort Hood"]
    for docs in body["documents"]:  # each query's documents cut to 40 tokens on their own, none crowded out
        assert docs.startswith("Doc 1: ") and 30 < len(tokenizer(docs)["input_ids"]) <= 41
    assert logs["num_searches"] == 1.0 and logs["num_queries"] == 3.0 and logs["invalid_actions"] == 0.0
    assert result["reward"] == 1.0  # the reward server's search_r1_em: the policy's answer is the one read


def test_four_turns_then_a_last_one_without_search(episode):
    prompt, result, text, logs = episode([FOUR] * 5 + [ANSWER], "episode.max_tokens_per_query=40")
    assert text[len(prompt) :].count("<information>") == 4 and text.endswith("</search>")
    assert logs["num_searches"] == 4.0 and logs["search_capped"] == 1.0 and result["reward"] == 0.0


def test_the_block_is_byte_for_byte_rag_r1s():
    passages = [
        Passage("1", "Paris", "Paris is the capital of France.", 1.0),
        Passage("2", "", "Title: Lyon Text: A city.", 1.0),
    ]
    docs = [[f"Doc {j}: {rag_r1.passage_entry(p)}" for j, p in enumerate(passages, start=1)], []]
    block = rag_r1.queries_block(["capital of France", "Caf\u00e9"], docs, "unused", after="</search>")
    assert block == (
        '\n<information>\n{\n  "query": [\n    "capital of France",\n    "Caf\\u00e9"\n  ],\n  "documents": [\n'
        '    "Doc 1: Paris   Paris is the capital of France.\\nDoc 2: Lyon   A city.",\n'
        '    ""\n  ]\n}\n</information>\n'
    )
    assert rag_r1.queries_block(["q"], [[]], "", after="</search>\n").startswith("<information>\n{")
    assert get_protocol("rag-r1") is rag_r1 and rag_r1.stops(False) == ["</search>", "</answer>"]


def test_the_stage_keeps_one_protocol_and_several_queries():
    stage, _ = load_stage(STAGE)
    assert (stage.protocol, stage.reward.formula, stage.episode.max_turns) == ("rag-r1", "search_r1_em", 4)
    with pytest.raises(ConfigError, match="RAG-R1's protocol sends several queries a search"):
        load_stage(STAGE, ["episode.max_queries_per_block=1"])
    with pytest.raises(ConfigError, match="protocol search-r1 takes one query a search"):
        load_stage(STAGE, ["protocol=search-r1", "reward.protocol=search-r1"])
    with pytest.raises(ConfigError, match="and reward.protocol is rag-r1: set `reward.protocol: search-r1`"):
        load_stage(STAGE, ["protocol=search-r1"])
    with pytest.raises(ConfigError, match="protocol: rag-r1, and reward.formula searchrl reads r1-searcher"):
        load_stage(STAGE, ["reward.formula=searchrl", "reward.protocol=null"])
    with pytest.raises(
        ConfigError, match="formula searchrl reads r1-searcher, search-r1 or tool-call's tags, not rag-r1's"
    ):
        load_stage(STAGE, ["reward.formula=searchrl"])
