"""Rendering a question into the policy's prompt, from the model config (templates are data), and the model
config whose prompt a stage's policy sees (the stage's own prompt text over the model config's)."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from searchrl.config import ConfigError
from searchrl.hub import load_tokenizer as load_hub_tokenizer
from searchrl.protocols import DEFAULT_PROTOCOL, get_protocol
from searchrl.stage.config import ModelConfig, StageConfig
from searchrl.stage.prompt import pool_listing


class ChatTokenizer(Protocol):
    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


def render_prompt(
    model: ModelConfig,
    question: str,
    tokenizer: ChatTokenizer | None = None,
    prompt_end: str | None = get_protocol(DEFAULT_PROTOCOL).PROMPT_END,
) -> str:
    """The full prompt for one question; it ends with `prompt_end` (R1-Searcher's `<think>`, which the model
    closes; None for a protocol whose policy opens its own, as Search-R1's).

    Base models fill the plain template. Chat models need the tokenizer, whose own chat template
    wraps the system message and the user turn; the assistant turn then opens with `assistant_prefix`.
    """
    question = question.strip()
    if model.kind == "base":
        assert model.template is not None
        return _ended(model, model.template.replace("{question}", question), prompt_end)
    # Without a system message the tokenizer's template puts its own default, as it did for Router-R1.
    system = [{"role": "system", "content": model.system}] if model.system else []
    messages = [*system, {"role": "user", "content": model.user.replace("{question}", question)}]
    return render_messages(model, messages, tokenizer, prompt_end)


def render_messages(
    model: ModelConfig,
    messages: list[dict[str, str]],
    tokenizer: ChatTokenizer | None = None,
    prompt_end: str | None = None,
) -> str:
    """Prompt messages through the chat template when the model has one (a chat config), the assistant turn opened
    with `assistant_prefix`; else the first message's text as it is. A published row's own messages are rendered
    so, as Search-R1's data loader renders them."""
    if model.kind == "base":
        return _ended(model, messages[0]["content"], prompt_end)
    if tokenizer is None:
        raise ValueError(f"model {model.name!r} is a chat model: pass its tokenizer to render the chat template")
    prompt = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **model.chat_template_kwargs
    )
    tools = model.chat_template_kwargs.get("tools")
    if isinstance(tools, list) and not _lists_tools(model, messages, tokenizer, prompt, tools):
        raise ValueError(
            f"model {model.name!r}: the chat template of {model.tokenizer} does not list the tools; a protocol "
            "that calls tools (tool-call) needs a chat model whose template renders `tools` (docs/REWARDS.md)"
        )
    return _ended(model, prompt + model.assistant_prefix, prompt_end)


def _lists_tools(
    model: ModelConfig, messages: list[dict[str, str]], tokenizer: ChatTokenizer, prompt: str, tools: list
) -> bool:
    """Whether the template rendered the tools: each one's name in the prompt, which the prompt without the tools
    lacks there (families quote it, `"search"`, or declare it, Gemma 4's `declaration:search{`)."""
    kwargs = {k: v for k, v in model.chat_template_kwargs.items() if k != "tools"}
    bare = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    return prompt != bare and all(
        prompt.count(t["function"]["name"]) > bare.count(t["function"]["name"]) for t in tools
    )


def _ended(model: ModelConfig, prompt: str, prompt_end: str | None) -> str:
    if prompt_end is not None and not prompt.rstrip().endswith(prompt_end):
        raise ValueError(f"model {model.name!r}: the rendered prompt must end with {prompt_end}")
    return prompt


def prompt_end(stage: StageConfig) -> str | None:
    """What every prompt of the stage's protocol ends with (render_prompt's check)."""
    return get_protocol(stage.protocol).PROMPT_END


def load_tokenizer(model: ModelConfig) -> Any:
    """The model's Hugging Face tokenizer (a hub name or a local path); offline, an error naming what to fetch."""
    tokenizer = load_hub_tokenizer(model.tokenizer)
    if model.kind == "chat":
        check_template_kwargs(model, tokenizer)
    return tokenizer


def check_template_kwargs(model: ModelConfig, tokenizer: ChatTokenizer) -> None:
    """Refuses a switch the tokenizer's chat template does not read: a Jinja template ignores unknown keywords, so
    `enable_thinking` given to a template without a thinking mode would change nothing, silently."""
    probe = [{"role": "user", "content": "?"}]
    for key, value in model.chat_template_kwargs.items():
        if not isinstance(value, bool):
            continue
        renders = {
            tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True, **{key: flag})
            for flag in (True, False)
        }
        if len(renders) == 1:
            raise ConfigError(
                f"model {model.name!r}: chat_template_kwargs.{key}: the chat template of {model.tokenizer} does not "
                f"read it; remove the key, or point tokenizer_path at a tokenizer whose template has it"
            )


def template_fingerprint(model: ModelConfig) -> str:
    """A hash of what shapes the prompt text; a data preparation report records it, and the
    preflight compares it with the job's model config."""
    parts: list = [model.kind, model.template, model.system, model.user, model.assistant_prefix, model.tokenizer]
    if model.chat_template_kwargs:  # only when set: the fingerprints of data prepared before stay the same
        parts.append(model.chat_template_kwargs)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def protocol_model(model: ModelConfig, protocol: str) -> ModelConfig:
    """The model config under a protocol's own instruction (Search-R1's), sent as its trainer sends it: plain text to
    a base model, the user turn to a chat one, after the tokenizer's default system message, with nothing after the
    marker; the model config unchanged for a protocol without one (R1-Searcher's prompts are the model configs')."""
    speaks = get_protocol(protocol)
    instruction = speaks.PROMPT
    if instruction is None:
        return model
    if speaks.TOOLS is not None:
        # A native tool call: the functions go to the chat template, which lists them in its system turn.
        if model.kind == "base":
            raise ValueError(
                f"protocol {protocol}: the model {model.name!r} is a base model; a native tool call needs a chat "
                "model whose template lists tools (e.g. configs/models/qwen3-8b.yaml)"
            )
        kwargs = {**model.chat_template_kwargs, "tools": speaks.TOOLS}
        update = {"system": None, "user": instruction, "assistant_prefix": "", "chat_template_kwargs": kwargs}
        return model.model_copy(update=update)
    if model.kind == "base":
        return model.model_copy(update={"template": instruction})
    return model.model_copy(update={"system": None, "user": instruction, "assistant_prefix": ""})


def effective_model(model: ModelConfig, stage: StageConfig) -> ModelConfig:
    """The model config whose prompt the stage's policy sees: the stage's prompt, when it has one, with the
    pool filled in ({models}: the listing, {names}: the names, comma-separated) and the episode's multi-query
    settings ({max_queries}, {separator}); without one, the instruction of the stage's protocol where it has its own
    (Search-R1's); the model config unchanged otherwise."""
    prompt = stage.prompt
    if prompt is None:
        return protocol_model(model, stage.protocol)
    text = "".join(t or "" for t in (prompt.base, prompt.system, prompt.user))
    listing, names = "", ""
    if "{models}" in text or "{names}" in text:
        if stage.search.router is None:
            raise ValueError(f"{stage.stage}: prompt: lists the pool of search.router, which is not set")
        names = ", ".join(m.name for m in stage.search.router.models)
        listing = pool_listing(stage.search.router, prompt.model_line)

    def fill(text: str) -> str:
        episode = stage.episode
        text = text.replace("{max_queries}", str(episode.max_queries_per_block))
        text = text.replace("{separator}", episode.query_separator)
        return text.replace("{models}", listing).replace("{names}", names)

    if model.kind == "base":
        if prompt.base is None:
            raise ValueError(f"{stage.stage}: prompt.base: needed for the base model {model.name!r}")
        return model.model_copy(update={"template": fill(prompt.base)})
    # A protocol whose policy opens its own `<think>` (Search-R1's family) puts nothing after the assistant marker.
    opening = {} if get_protocol(stage.protocol).PROMPT_END else {"assistant_prefix": ""}
    if prompt.user is not None:
        return model.model_copy(
            update={"system": fill(prompt.system) if prompt.system else None, "user": fill(prompt.user), **opening}
        )
    if prompt.system is None:
        raise ValueError(f"{stage.stage}: prompt.system or prompt.user: needed for the chat model {model.name!r}")
    return model.model_copy(update={"system": fill(prompt.system), **opening})
