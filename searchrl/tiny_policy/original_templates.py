"""Tiny tokenizers that carry a checkpoint family's original chat template (examples/chat_templates/, copied from
TRL's wheel), for CPU rehearsals of chat policies whose own tokenizer cannot be fetched here: the prompts, the tool
list, the family's call form and its tool turn are then rendered by the template the checkpoint ships, not by a
stand-in written here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from searchrl.paths import EXAMPLES
from searchrl.tiny_policy.model import build_tokenizer

TEMPLATES = EXAMPLES / "chat_templates"
# Checkpoint names by prefix, the most specific first (examples/chat_templates/README.md names each file's sources).
# Qwen3.5's small checkpoints ship the template with thinking off by default.
CHECKPOINT_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("Qwen/Qwen2.5-", "qwen2_5"),
    ("Qwen/Qwen3-4B-Instruct-2507", "qwen3_instruct_2507"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3_instruct_2507"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3_instruct_2507"),
    ("Qwen/Qwen3-", "qwen3"),
    ("Qwen/Qwen3.5-0.8B", "qwen3_5_nothink"),
    ("Qwen/Qwen3.5-2B", "qwen3_5_nothink"),
    ("Qwen/Qwen3.5-", "qwen3_5_think"),
    ("Qwen/Qwen3.6-", "qwen3_6"),
    ("Qwen/Qwen3.8-", "qwen3_8"),
    ("meta-llama/Llama-3.1-", "llama3_1"),
    ("meta-llama/Llama-3.2-", "llama3_2"),
    ("deepseek-ai/DeepSeek-V3", "deepseekv3"),
    ("google/gemma-4-", "gemma4"),
    ("zai-org/GLM-4.5", "glm4moe"),
    ("zai-org/GLM-4.6", "glm4moe"),
    ("openai/gpt-oss-", "gptoss"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-", "nemotron_3_nano"),
    ("nvidia/NVIDIA-Nemotron-3-Super-", "nemotron_3_super"),
)
# A family's turn ends, as its template closes an assistant turn: the stand-in's end of sequence, as the real
# tokenizer's is, so a generation ends where the family's turn does.
TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<｜end▁of▁sentence｜>", "<turn|>", "<|return|>", "<|end|>", "<|user|>")


def original_template(checkpoint: str) -> Path | None:
    """The original chat template file the checkpoint ships, None for one not listed."""
    for prefix, name in CHECKPOINT_TEMPLATES:
        if checkpoint.startswith(prefix):
            return TEMPLATES / f"{name}.jinja"
    return None


def original_template_tokenizer(template: Path, texts: Iterable[str]) -> Any:
    """A tiny byte-level tokenizer (any text round-trips) with `template` as its chat template and the family's
    end-of-turn marker as its end of sequence."""
    tokenizer = build_tokenizer(texts, protocol_tokens=False, qwen_split=True)
    source = template.read_text(encoding="utf-8")
    tokenizer.chat_template = source
    ends = [end for end in TURN_ENDS if end in source]
    if ends:
        tokenizer.add_special_tokens({"additional_special_tokens": ends})
        tokenizer.eos_token = ends[0]
    return tokenizer


def save_original_template_tokenizer(out: Path, template: Path, texts: Iterable[str]) -> Path:
    original_template_tokenizer(template, texts).save_pretrained(out)
    return out
