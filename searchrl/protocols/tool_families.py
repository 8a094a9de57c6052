"""How each open model family writes a call of the search function, and how its chat template hands back the result.

A call form is what a family's chat template renders for an assistant's `tool_calls`: the span of one call in the
policy's text, the string generation stops at, and a `response_template` for transformers' `parse_response` that reads
the span into `{"name", "arguments"}`. The templates here are ours, written for the one thing the protocol needs (the
call); a checkpoint whose tokenizer carries its own `response_template` is read with that one once bound.

`TOOL_TURNS` matches every form's tool turn, so the reward, which has no tokenizer, reads the policy's own text in
whichever family the run trains; each binding checks that its template's turn is one of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallForm:
    name: str
    # One complete call in the policy's own text; forms that share `<tool_call>` are told apart by `shape`.
    call: re.Pattern[str]
    template: dict[str, Any]
    stop: str  # where generation stops: the end of the call (or of the turn, where the call has no end of its own)
    opener: str  # what opens the call whose end `stop` is
    documents_open: str
    documents_close: str
    unreadable: str = "bad JSON"  # the problem named when `template` reads no call from a span
    shape: re.Pattern[str] | None = None


def _fields(call: dict[str, Any], anchor: str) -> dict[str, Any]:
    # The span holds one call and nothing else; the content field only catches what surrounds a malformed one.
    return {"defaults": {"role": "assistant"}, "start_anchor": anchor, "fields": {"tool_calls": call, "content": {}}}


_NAMED = {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}

HERMES_JSON = CallForm(
    name="hermes-json",
    call=re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL),
    template=_fields(
        {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "<|im_start|>assistant\n",
    ),
    stop="</tool_call>",
    opener="<tool_call>",
    documents_open="<tool_response>",
    documents_close="</tool_response>",
)
XML_FUNCTION = CallForm(
    name="xml-function",
    call=HERMES_JSON.call,
    shape=re.compile(r"^\s*<function="),
    template=_fields(
        {
            "open_pattern": r"<tool_call>\s*<function=(?P<name>[^>\n]+)>",
            "close_pattern": r"</tool_call>\s*",
            "content": "xml-inline",
            "content_args": {
                "tag_pattern": r"<parameter=(?P<key>[^>\n]+)>\n?(?P<value>.*?)\n?</parameter>",
                "value_parser": {"name": "text"},
            },
            "transform": _NAMED,
        },
        "<|im_start|>assistant\n",
    ),
    stop="</tool_call>",
    opener="<tool_call>",
    documents_open="<tool_response>",
    documents_close="</tool_response>",
    unreadable="bad call",
)
ARG_KEY = CallForm(
    name="arg-key",
    call=HERMES_JSON.call,
    shape=re.compile(r"<arg_key>"),
    template=_fields(
        {
            "open_pattern": r"<tool_call>\s*(?P<name>[^\s<]+)\s*",
            "close_pattern": r"</tool_call>\s*",
            "content": "xml-inline",
            "content_args": {
                "tag_pattern": r"<arg_key>(?P<key>[^<]+)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>",
                "value_parser": {"name": "text"},
            },
            "transform": _NAMED,
        },
        "<|assistant|>",
    ),
    stop="</tool_call>",
    opener="<tool_call>",
    documents_open="<tool_response>",
    documents_close="</tool_response>",
    unreadable="bad call",
)
# Llama 3.1/3.2 write a bare JSON object with `parameters`, ended by the end of the turn: no marker of its own, so
# the span is the object (one level of nesting inside its parameters) and generation stops at `<|eot_id|>`.
BARE_JSON = CallForm(
    name="bare-json",
    call=re.compile(r'\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"parameters"\s*:\s*(?:[^{}]|\{[^{}]*\})*\}', re.DOTALL),
    template=_fields(
        {
            "open_pattern": r'\{\s*"name"\s*:\s*"(?P<name>[^"]+)"\s*,\s*"parameters"\s*:\s*',
            "close_pattern": r"\}\s*(?:<\|eot_id\|>|$)",
            "content": "json",
            "transform": _NAMED,
        },
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    stop="<|eot_id|>",
    opener='{"name"',
    documents_open="<|start_header_id|>ipython<|end_header_id|>",
    documents_close="<|eot_id|><|start_header_id|>assistant<|end_header_id|>",
)
# gpt-oss (harmony) names the function in the message header and ends the call with `<|call|>`.
HARMONY = CallForm(
    name="harmony",
    call=re.compile(
        r"to=functions\.[^\s<]+\s*<\|channel\|>commentary\s*(?:<\|constrain\|>)?json<\|message\|>.*?<\|call\|>",
        re.DOTALL,
    ),
    template=_fields(
        {
            "open_pattern": r"to=functions\.(?P<name>[^\s<]+)\s*<\|channel\|>commentary\s*(?:<\|constrain\|>)?"
            r"json<\|message\|>",
            "close_pattern": r"<\|call\|>\s*",
            "content": "json",
            "transform": _NAMED,
        },
        "<|start|>assistant",
    ),
    stop="<|call|>",
    opener="to=functions.",
    documents_open="<|start|>functions.",
    documents_close="<|end|><|start|>assistant",
)
# Gemma 4 writes its arguments as JSON with bare keys and strings between `<|"|>` marks.
GEMMA_CALL = CallForm(
    name="gemma-call",
    call=re.compile(r"<\|tool_call>.*?<tool_call\|>", re.DOTALL),
    template=_fields(
        {
            "open_pattern": r"<\|tool_call>call:(?P<name>[\w.-]+)",
            "close_pattern": r"<tool_call\|>\s*",
            "content": "json",
            "content_args": {"string_delims": [['<|"|>', '<|"|>']], "unquoted_keys": True},
            "transform": _NAMED,
        },
        "<|turn>model\n",
    ),
    stop="<tool_call|>",
    opener="<|tool_call>",
    documents_open="<|tool_response>",
    documents_close="<tool_response|>",
)
FORMS: dict[str, CallForm] = {f.name: f for f in (HERMES_JSON, XML_FUNCTION, ARG_KEY, BARE_JSON, HARMONY, GEMMA_CALL)}

# Every form's tool turn: what the environment appends between a call and the policy's next words. A turn that
# ends by opening a think block (Qwen3.5's and Nemotron 3's with thinking on) keeps that `<think>` in the policy's
# own text (group `open`), so the block the policy closes after it reads as opened.
TOOL_TURNS = re.compile(
    r"\n?(?:<\|im_end\|>\s*)?<\|im_start\|>user\s*(?:<tool_response>.*?</tool_response>\s*)+<\|im_end\|>\s*"
    r"<\|im_start\|>assistant\n?(?:<think>\s*</think>\s*|(?P<open><think>\n?))?"
    r"|<\|observation\|>\s*(?:<tool_response>.*?</tool_response>\s*)+<\|assistant\|>(?:\n?<think></think>)?"
    r"|<\|eot_id\|><\|start_header_id\|>ipython<\|end_header_id\|>\n\n.*?"
    r"<\|eot_id\|><\|start_header_id\|>assistant<\|end_header_id\|>\n\n"
    r"|<\|start\|>functions\.[^\s<]+ to=assistant<\|channel\|>commentary<\|message\|>.*?<\|end\|><\|start\|>assistant"
    r"|<\|tool_response>.*?<tool_response\|>",
    re.DOTALL,
)
# What only the environment writes: the policy typing one of these forged a tool result.
RESPONSE_MARKERS = (
    "<tool_response>",
    "</tool_response>",
    "<|tool_response>",
    "<tool_response|>",
    "<|start_header_id|>ipython",
    "<|start|>functions.",
)
