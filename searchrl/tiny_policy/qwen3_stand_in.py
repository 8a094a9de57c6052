"""A chat template of the shape Qwen3's tokenizers carry, for tiny stand-ins where the real one cannot be fetched.

It renders what our code depends on the way Qwen3's does: ChatML turns, a thinking switch (`enable_thinking`
false closes an empty think block in the generation prompt), a `tools` list in the system turn, an assistant's
tool calls as `<tool_call>` JSON, and tool results as `<tool_response>` blocks inside one user turn. The wording of
its tool instructions is ours. ChatML as Qwen2.5 renders it stays in `searchrl/tiny_policy/model.py`; this
module is not there, since every file of that package is an input of the shipped warm start's hash.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchrl.tiny_policy.model import TINY_SHAPE, build_tokenizer

TURN_OPEN, TURN_CLOSE, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
# Qwen3's tokenizer holds these as added tokens of their own (not special: they survive skip_special_tokens).
TEXT_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# Newlines right after a block tag are written as expressions: Hugging Face renders templates with trim_blocks,
# which would drop them.
_NL = "{{ '\\n' }}"
_TOOLS_SYSTEM = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nThese functions can be called, one JSON signature a line inside <tools></tools>:\n<tools>"
    "{% for tool in tools %}" + _NL + "{{ tool | tojson }}{% endfor %}" + _NL + "</tools>\n\n"
    "To call one, write a JSON object with its name and its arguments inside <tool_call></tool_call>:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>"
    + _NL
    + "{% endif %}"
)
_ASSISTANT = (
    "<|im_start|>assistant\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content.strip() }}\n</think>\n\n{% endif %}"
    "{{ m.content or '' }}"
    "{% for call in m.tool_calls or [] %}"
    "{% set f = call.function if call.function is defined else call %}"
    "{% if not loop.first or m.content %}" + _NL + "{% endif %}"
    '<tool_call>\n{"name": "{{ f.name }}", "arguments": '
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}"
    "}\n</tool_call>{% endfor %}<|im_end|>\n"
)
_TOOL = (
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    + _NL
    + "<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>" + _NL + "{% endif %}"
)
QWEN3_STYLE = (
    _TOOLS_SYSTEM + "{% for m in messages %}"
    "{% if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>" + _NL + ""
    "{% elif m.role == 'assistant' %}" + _ASSISTANT + "{% elif m.role == 'tool' %}" + _TOOL + "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant" + _NL + ""
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def qwen3_style_tokenizer(texts: Iterable[str]) -> Any:
    """A tiny tokenizer shaped like Qwen3's: Qwen's pre-tokenizer split, the ChatML markers as special tokens, the
    think and tool tags as added ones, `<|im_end|>` the end of a turn (what a chat model's generation stops at)."""
    tokenizer = build_tokenizer(texts, protocol_tokens=False, qwen_split=True)
    tokenizer.add_special_tokens({"additional_special_tokens": [TURN_OPEN, TURN_CLOSE, END_OF_TEXT]})
    tokenizer.add_tokens(list(TEXT_TOKENS))
    tokenizer.eos_token = TURN_CLOSE
    tokenizer.pad_token = END_OF_TEXT
    tokenizer.chat_template = QWEN3_STYLE
    return tokenizer


def save_qwen3_style_tokenizer(out: Path, texts: Iterable[str]) -> Path:
    qwen3_style_tokenizer(texts).save_pretrained(out)
    return out


def save_qwen3_style_checkpoint(out: Path, texts: Iterable[str], seed: int = 0) -> Path:
    """A tiny random checkpoint of the Qwen3 architecture (Qwen3ForCausalLM, built from a config) with the tokenizer
    above; its generation config ends at either end token, as Qwen3's chat models' does."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = qwen3_style_tokenizer(texts)
    ends = [tokenizer.convert_tokens_to_ids(TURN_CLOSE), tokenizer.convert_tokens_to_ids(END_OF_TEXT)]
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        **TINY_SHAPE,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=ends[0],
        pad_token_id=ends[1],
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=ends, pad_token_id=ends[1])
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
