"""The native tool-call protocol (`protocol: tool-call`) on a tiny Qwen3 checkpoint with a chat template of Qwen3's
shape: the prompt lists the search function, a call is read from the model's own format, the result returns as the
template's tool turn, and a malformed call is a violation the reward names, never a crash."""

import asyncio
import json

import pytest
import yaml

from eval.generation import GenParams, HFTextEngine, run_episodes
from searchrl.config import load
from searchrl.protocols import bind_template, get_protocol
from searchrl.protocols import tool_call as tc
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import RewardSpec
from searchrl.rollout.environment import SearchEnvironment
from searchrl.search.base import Passage
from searchrl.stage.config import EpisodeConfig, ModelConfig
from searchrl.stage.templates import load_tokenizer, protocol_model, render_prompt
from searchrl.tiny_policy.model import save_chat_tokenizer
from searchrl.tiny_policy.qwen3_stand_in import save_qwen3_style_checkpoint
from tests.conftest import ROOT

QUESTION = "Who founded Citibank?"
PASSAGE = Passage("1", "Citibank", "Citibank was founded in 1812 by Samuel Osgood.", 1.0)


def call(body: dict | str) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return f"{tc.CALL_OPEN}\n{text}\n{tc.CALL_CLOSE}"


SEARCH = "<think>\nI should look it up.\n</think>\n\n" + call({"name": "search", "arguments": {"query": "Citibank"}})
ANSWER = "<think>\nThe passage names him.\n</think>\n\n<answer> Samuel Osgood </answer>"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    texts = [json.loads(line)["gen_text_store"] for line in (ROOT / "examples/bamboogle_llama_sample.jsonl").open()]
    return save_qwen3_style_checkpoint(tmp_path_factory.mktemp("qwen3") / "ckpt", texts)


def qwen3(checkpoint, name="qwen3-8b") -> ModelConfig:
    data = yaml.safe_load((ROOT / f"configs/models/{name}.yaml").read_text())
    return ModelConfig.model_validate({**data, "model_path": str(checkpoint)})


def test_the_prompt_lists_the_search_function(checkpoint):
    model = protocol_model(qwen3(checkpoint), "tool-call")
    prompt = render_prompt(model, QUESTION, load_tokenizer(model), get_protocol("tool-call").PROMPT_END)
    assert '"name": "search"' in prompt.split("<|im_start|>user", 1)[0]  # in the template's system turn
    assert prompt.endswith(f"Question: {QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="base model; a native tool call needs a chat model"):
        protocol_model(load(ModelConfig, ROOT / "configs/models/qwen3-8b-base.yaml"), "tool-call")


def test_a_template_without_tools_is_refused(tmp_path, checkpoint):
    chatml = save_chat_tokenizer(tmp_path / "chatml", [QUESTION])
    model = protocol_model(qwen3(checkpoint).model_copy(update={"chat_template_kwargs": {}}), "tool-call")
    from transformers import AutoTokenizer

    with pytest.raises(ValueError, match="does not list the tools"):
        render_prompt(model, QUESTION, AutoTokenizer.from_pretrained(chatml), None)
    with pytest.raises(ValueError, match="renders no </tool_call> call or no tool result"):
        bind_template(get_protocol("tool-call"), AutoTokenizer.from_pretrained(chatml))


@pytest.mark.parametrize(
    "body,problem",
    [
        ('{"name": "search", "arguments": {"query": "Citibank"', "bad JSON"),
        ({"name": "lookup", "arguments": {"query": "Citibank"}}, "unknown function 'lookup'"),
        ({"name": "search", "arguments": {"q": "Citibank"}}, "missing argument 'query'"),
        ({"name": "search", "arguments": {"query": "  "}}, "missing argument 'query'"),
        ('"search"', "bad JSON"),
    ],
)
def test_a_malformed_call_is_a_named_violation_not_a_search(body, problem):
    protocol = get_protocol("tool-call")
    segment = "<think>\nhm\n</think>\n\n" + call(body)
    assert protocol.search_query(segment) is None
    parsed = tc.parse_solution(segment)
    assert parsed.call_problems == [problem] and not parsed.searched
    spec = RewardSpec(protocol="tool-call", answer_weight=0.0, search_weight=0.5, format_weight=0.5)
    scored = score_solution(segment, ["Samuel Osgood"], spec, {"num_searches": 0})
    assert scored.logs["violation_tool_call"] == 1.0


def test_each_thinking_setting_gets_its_templates_tool_turn(checkpoint):
    tokenizer = load_tokenizer(qwen3(checkpoint))
    on = bind_template(get_protocol("tool-call"), tokenizer, {"enable_thinking": True})
    off = bind_template(get_protocol("tool-call"), tokenizer, {"enable_thinking": False})
    assert on.turn == get_protocol("tool-call").turn  # Qwen's ChatML tool turn
    assert off.turn.after.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    block = off.documents_block([off.passage_entry(PASSAGE)])
    assert "<tool_response>\nDoc 1 (Title: Citibank) Citibank was founded" in block
    # The reward reads the policy's own text around either turn.
    parsed = tc.parse_solution(SEARCH + block + ANSWER)
    assert parsed.answer == "Samuel Osgood" and parsed.num_searches == parsed.num_document_blocks == 1
    assert parsed.blocks_balanced and parsed.structure_ok and not parsed.call_problems


class OnePassage:
    def __init__(self):
        self.queries = []

    async def search(self, queries, top_k):
        self.queries += queries
        return [[PASSAGE] for _ in queries]

    async def aclose(self):
        pass


def memorised(checkpoint, texts):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = [torch.tensor([tokenizer(t, add_special_tokens=False)["input_ids"]]) for t in texts]
    for _ in range(120):
        for ids in batches:
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return model.eval(), tokenizer


def test_an_episode_calls_reads_the_tool_turn_and_answers(checkpoint):
    """A tiny Qwen3 trained to repeat one episode: the call stops generation, the environment searches and appends
    the template's tool turn, the model answers after it, and the reward pays a clean, correct answer in full."""
    model = protocol_model(qwen3(checkpoint), "tool-call")
    tokenizer = load_tokenizer(model)
    protocol = bind_template(get_protocol("tool-call"), tokenizer, model.chat_template_kwargs)
    prompt = render_prompt(model, QUESTION, tokenizer, None)
    episode = SEARCH + protocol.documents_block([protocol.passage_entry(PASSAGE)]) + ANSWER
    lm, tok = memorised(checkpoint, [prompt + episode + "<|im_end|>"])
    backend = OnePassage()
    env = SearchEnvironment(backend, EpisodeConfig(top_k=1, max_searches=2, max_segment_tokens=96), protocol=protocol)
    params = GenParams.for_protocol(protocol, max_tokens=96, temperature=0.0)
    (result,) = asyncio.run(run_episodes(HFTextEngine(lm, tok), env, [prompt], ["Samuel Osgood"], params))
    assert backend.queries == ["Citibank"]
    assert result.episode.solution == episode and result.episode.num_searches == 1
    assert protocol.scored_answer(prompt, result.episode.solution) == "Samuel Osgood"
    spec = RewardSpec(protocol="tool-call")
    scored = score_solution(result.episode.solution, ["Samuel Osgood"], spec, {"num_searches": 1})
    assert scored.logs["format_ok"] == 1.0 and scored.logs["em"] == 1.0
    assert all(v == 0.0 for k, v in scored.logs.items() if k.startswith("violation_"))
