"""The Qwen3 model configs (base, chat with thinking on and off) on a tiny random Qwen3 checkpoint built from a
config, with a chat template of Qwen3's shape: prompts, data preparation, where generation stops, evaluation."""

import asyncio
import json
import subprocess
import sys

import pytest
import yaml

from eval.generation import GenParams, HFTextEngine
from searchrl.config import ConfigError, load
from searchrl.protocols import r1_searcher
from searchrl.stage.config import ModelConfig
from searchrl.stage.templates import load_tokenizer, render_prompt
from searchrl.tiny_policy.model import save_chat_tokenizer
from searchrl.tiny_policy.qwen3_stand_in import save_qwen3_style_checkpoint
from tests.conftest import ROOT

CONFIGS = {
    name: ROOT / f"configs/models/{name}.yaml" for name in ("qwen3-8b-base", "qwen3-8b", "qwen3-8b-no-thinking")
}
QUESTION = "Who was president of the United States in the year that Citibank was founded?"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    texts = [json.loads(line)["gen_text_store"] for line in (ROOT / "examples/bamboogle_llama_sample.jsonl").open()]
    return save_qwen3_style_checkpoint(tmp_path_factory.mktemp("qwen3") / "ckpt", texts)


def pointed(name: str, folder, tmp_path):
    """The shipped config with its tokenizer (and weights) read from the tiny checkpoint."""
    data = yaml.safe_load(CONFIGS[name].read_text())
    out = tmp_path / f"{name}.yaml"
    out.write_text(yaml.safe_dump({**data, "model_path": str(folder)}))
    return out


def test_each_config_renders_as_its_thinking_setting_says(checkpoint, tmp_path):
    prompts = {}
    for name in CONFIGS:
        model = load(ModelConfig, pointed(name, checkpoint, tmp_path))
        tokenizer = load_tokenizer(model) if model.kind == "chat" else None
        prompts[name] = render_prompt(model, QUESTION, tokenizer)
    assert prompts["qwen3-8b-base"].endswith(f"User:{QUESTION}\nAssistant: <think>")
    assert prompts["qwen3-8b"].endswith(f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>")
    # Thinking off: the template's empty think block, then the protocol's own.
    assert prompts["qwen3-8b-no-thinking"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n<think>")
    assert prompts["qwen3-8b"].startswith("<|im_start|>system\nYou are a helpful assistant")


def test_a_switch_the_template_does_not_read_is_refused(tmp_path):
    chatml = save_chat_tokenizer(tmp_path / "chatml", [QUESTION])
    data = yaml.safe_load(CONFIGS["qwen3-8b"].read_text())
    model = ModelConfig.model_validate({**data, "tokenizer_path": str(chatml)})
    with pytest.raises(ConfigError, match="chat_template_kwargs.enable_thinking: the chat template of .* does not"):
        load_tokenizer(model)
    base = yaml.safe_load(CONFIGS["qwen3-8b-base"].read_text())
    with pytest.raises(ValueError, match="chat_template_kwargs: a base model"):
        ModelConfig.model_validate({**base, "chat_template_kwargs": {"enable_thinking": True}})


def test_data_preparation_renders_the_prompts(checkpoint, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": QUESTION, "answer": "james madison"}) + "\n")
    seen = {}
    for name in ("qwen3-8b", "qwen3-8b-no-thinking"):
        out = tmp_path / f"{name}.jsonl"
        cmd = [sys.executable, "-m", "stage1_format.prepare_data", "--input", str(questions), "--out", str(out)]
        cmd += ["--model", str(pointed(name, checkpoint, tmp_path)), "--keep-leaked", "--keep-duplicates"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        seen[name] = json.loads(out.read_text().splitlines()[0])["prompt"]
    assert seen["qwen3-8b"].endswith("<|im_start|>assistant\n<think>")
    assert seen["qwen3-8b-no-thinking"].endswith("</think>\n\n<think>")


def memorised(checkpoint, texts: list[str]):
    """The tiny checkpoint trained until greedy decoding repeats `texts`: what it writes next is then known, so the
    test sees where generation stops rather than where a random model wanders."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = [torch.tensor([tokenizer(t, add_special_tokens=False)["input_ids"]]) for t in texts]
    model.train()
    for _ in range(120):
        for ids in batches:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return model.eval(), tokenizer


def test_generation_stops_at_the_search_close_and_at_the_end_of_turn(checkpoint, tmp_path):
    model = load(ModelConfig, pointed("qwen3-8b", checkpoint, tmp_path))
    tokenizer = load_tokenizer(model)
    first = render_prompt(model, QUESTION, tokenizer)
    second = render_prompt(model, "What rocket launched the first spacecraft to approach Uranus?", tokenizer)
    search = f" I should look it up. {r1_searcher.BEGIN_QUERY} Citibank founded {r1_searcher.SEARCH_CLOSE}"
    answer = " I know it. </think>\n\n<answer> Titan IIIE </answer>"
    # After each stop, text that must never be generated: a later turn of the chat.
    after = "<|im_start|>user\nmore text the policy must not reach<|im_end|>"
    lm, tok = memorised(checkpoint, [first + search + after, second + answer + "<|im_end|>" + after])
    engine = HFTextEngine(lm, tok)
    params = GenParams.for_protocol(r1_searcher, max_tokens=96, temperature=0.0)
    found, answered = asyncio.run(engine.generate_batch([first, second], params))
    assert found.text == search and found.finish_reason == "stop"
    # The end of the assistant turn (the tokenizer's eos, <|im_end|>) ends the segment and is not kept.
    assert answered.text == answer and answered.finish_reason == "stop"


def test_evaluation_runs_end_to_end(checkpoint, mini_index, tmp_path):
    cmd = [sys.executable, "-m", "eval.run_local", "--dataset", "bamboogle", "--model", str(checkpoint)]
    cmd += ["--template", str(CONFIGS["qwen3-8b-no-thinking"]), "--engine", "hf", "--index", str(mini_index)]
    cmd += ["--segment-tokens", "12", "--max-searches", "2", "--limit", "2", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((tmp_path / "bamboogle.jsonl").read_text().splitlines()) == 2
    summary = json.loads((tmp_path / "bamboogle.summary.json").read_text())
    assert summary["n"] == 2


def test_the_rehearsal_stand_in_reads_the_thinking_switch(tmp_path):
    """Where Qwen3's tokenizer cannot be fetched, the rehearsal renders its prompts with a stand-in carrying Qwen3's
    original template (not the ChatML one, which has no thinking mode and would be refused)."""
    from searchrl.rehearsal.episodes import stand_in_chat_model

    for name, end in (("qwen3-8b", "assistant\n<think>"), ("qwen3-8b-no-thinking", "</think>\n\n<think>")):
        model = load(ModelConfig, stand_in_chat_model(str(CONFIGS[name]), tmp_path / name))
        assert render_prompt(model, QUESTION, load_tokenizer(model)).endswith(end)
