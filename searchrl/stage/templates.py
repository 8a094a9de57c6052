"""Rendering a question into the policy's prompt, from the model config (templates are data)."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from searchrl.protocol import THINK_OPEN
from searchrl.stage.config import ModelConfig


class ChatTokenizer(Protocol):
    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


def render_prompt(model: ModelConfig, question: str, tokenizer: ChatTokenizer | None = None) -> str:
    """The full prompt for one question; it always ends with `<think>`, which the model closes.

    Base models fill the plain template. Chat models need the tokenizer, whose own chat template
    wraps the system message and the user turn; the assistant turn then opens with `<think>`.
    """
    question = question.strip()
    if model.kind == "base":
        assert model.template is not None
        prompt = model.template.replace("{question}", question)
    else:
        if tokenizer is None:
            raise ValueError(f"model {model.name!r} is a chat model: pass its tokenizer to render the chat template")
        # Without a system message the tokenizer's template puts its own default, as it did for Router-R1.
        system = [{"role": "system", "content": model.system}] if model.system else []
        messages = [*system, {"role": "user", "content": model.user.replace("{question}", question)}]
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt += model.assistant_prefix
    if not prompt.rstrip().endswith(THINK_OPEN):
        raise ValueError(f"model {model.name!r}: the rendered prompt must end with {THINK_OPEN}")
    return prompt


def load_tokenizer(model: ModelConfig) -> Any:
    """The model's Hugging Face tokenizer (a hub name or a local path); offline, an error naming what to fetch."""
    from searchrl.hub import load_tokenizer as load

    return load(model.tokenizer)


def template_fingerprint(model: ModelConfig) -> str:
    """A hash of what shapes the prompt text; a data preparation report records it, and the
    preflight compares it with the job's model config."""
    parts = [model.kind, model.template, model.system, model.user, model.assistant_prefix, model.tokenizer]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
