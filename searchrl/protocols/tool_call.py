"""The native tool-call protocol of chat models (`protocol: tool-call`), as Qwen2.5's and Qwen3's templates write it.

Search is a function in the chat template's `tools` list. The policy calls it in its own format,
`<tool_call>\n{"name": "search", "arguments": {"query": "..."}}\n</tool_call>`; the result comes back as a `tool`
turn, rendered by the tokenizer's chat template (`<tool_response>` inside a user turn, then a new assistant turn);
the final answer goes in `<answer>`, as in the other protocols. A call that is not JSON, names another function
or lacks its query is no search: the episode ends there and the reward names the problem (`violation_tool_call`).

The tool turn is the template's own: `with_template` derives it from the tokenizer once per process. Without a
tokenizer (the reward server, config checks) the ChatML turn Qwen's templates render stands in; the reward reads
any ChatML tool turn, and a template whose turn it could not read is refused when it is bound.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from searchrl.protocols import r1_searcher as r1
from searchrl.search.base import Passage

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
TOOL_NAME = "search"
QUERY_ARGUMENT = "query"
TOOLS: list[dict[str, Any]] | None = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Search a knowledge source; returns the passages that best match the query.",
            "parameters": {
                "type": "object",
                "properties": {QUERY_ARGUMENT: {"type": "string", "description": "a short keyword query"}},
                "required": [QUERY_ARGUMENT],
            },
        },
    }
]

NAME = "tool-call"
# The user turn, after the template's system turn that lists the tools; thinking, where the model has it, is its own.
PROMPT: str | None = (
    "Answer the question below. When you need facts, call the search function with a short keyword query; its "
    "results will be given to you. Search as many times as you need, one call at a time. Give the final answer "
    "inside <answer> </answer>: a few words, not a sentence.\n\nQuestion: {question}"
)
PROMPT_END: str | None = None
MULTI_QUERY = False
INVALID_ACTION: str | None = None
SEARCH_CLOSE = CALL_CLOSE
STOP_OPENS = {CALL_CLOSE: CALL_OPEN, ANSWER_CLOSE: ANSWER_OPEN}
DOCUMENTS_OPEN = RESPONSE_OPEN
DOCUMENTS_CLOSE = RESPONSE_CLOSE

_CALL = re.compile(f"{CALL_OPEN}(.*?){CALL_CLOSE}", re.DOTALL)
_ANSWER = re.compile(f"{ANSWER_OPEN}(.*?){ANSWER_CLOSE}", re.DOTALL)
# A tool turn as any ChatML template renders it: the assistant turn closed, a user turn of tool responses, a new
# assistant turn (with the empty think block Qwen3 adds when thinking is off).
_TOOL_TURN = re.compile(
    r"(?:<\|im_end\|>\s*)?<\|im_start\|>user\s*(?:<tool_response>.*?</tool_response>\s*)+<\|im_end\|>\s*"
    r"<\|im_start\|>assistant\n?(?:<think>\s*</think>\s*)?",
    re.DOTALL,
)
_SENTINEL = "\x00searchrl-tool-result\x00"


def read_call(body: str) -> tuple[str | None, str | None]:
    """The query of one call's body, or the problem that makes it no search: not JSON, another function, no query."""
    try:
        call = json.loads(body)
    except ValueError:
        return None, "bad JSON"
    if not isinstance(call, dict):
        return None, "bad JSON"
    if call.get("name") != TOOL_NAME:
        return None, f"unknown function {str(call.get('name'))[:40]!r}"
    arguments = call.get("arguments")
    if isinstance(arguments, str):  # some templates and models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None, "bad JSON"
    query = arguments.get(QUERY_ARGUMENT) if isinstance(arguments, dict) else None
    if not isinstance(query, str) or not query.strip():
        return None, f"missing argument {QUERY_ARGUMENT!r}"
    return " ".join(query.split()), None


def own_text(text: str) -> str:
    """The policy's own text: the tool turns the environment appended left out."""
    return _TOOL_TURN.sub("", text)


@dataclass(frozen=True)
class ToolTurn:
    """What the environment appends after a call, around the results: the template's turn, split at the results."""

    before: str = "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
    after: str = "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def tool_turn(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> ToolTurn:
    """The tool turn as the tokenizer's chat template renders it after a search call, with a new assistant turn; an
    error naming what is missing when the template renders no call or no tool result, or a turn the reward cannot
    read."""
    call = {"type": "function", "function": {"name": TOOL_NAME, "arguments": {QUERY_ARGUMENT: "q"}}}
    messages = [
        {"role": "user", "content": "?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": _SENTINEL},
    ]
    kwargs = {k: v for k, v in (template_kwargs or {}).items() if k != "tools"}
    rendered = tokenizer.apply_chat_template(
        messages, tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
    )
    if CALL_CLOSE not in rendered or _SENTINEL not in rendered:
        raise ValueError(
            f"protocol tool-call: the tokenizer's chat template renders no {CALL_CLOSE} call or no tool result; "
            "use a chat model whose template has tools (Qwen2.5, Qwen3), or another protocol"
        )
    tail = rendered[rendered.rindex(CALL_CLOSE) + len(CALL_CLOSE) :]
    before, after = tail.split(_SENTINEL, 1)
    turn = ToolTurn(before, after)
    probe = f"{CALL_OPEN}{{}}{CALL_CLOSE}{turn.before}x{turn.after}{ANSWER_OPEN} a {ANSWER_CLOSE}"
    if own_text(probe) != f"{CALL_OPEN}{{}}{CALL_CLOSE}{ANSWER_OPEN} a {ANSWER_CLOSE}":
        raise ValueError(
            f"protocol tool-call: the chat template's tool turn {tail!r} is not a ChatML turn the reward can read"
        )
    return turn


@dataclass(frozen=True)
class ParsedSolution:
    text: str
    own: str
    calls: tuple[str, ...]  # the body of every complete call the policy wrote
    answer_opens: int
    answer_closes: int
    answer: str | None
    ANSWER_FORBIDDEN = (CALL_OPEN, CALL_CLOSE, RESPONSE_OPEN, RESPONSE_CLOSE, THINK_OPEN, THINK_CLOSE)

    @cached_property
    def read(self) -> list[tuple[str | None, str | None]]:
        return [read_call(body) for body in self.calls]

    @property
    def call_problems(self) -> list[str]:
        return [problem for _, problem in self.read if problem is not None]

    @property
    def outside_documents(self) -> str:
        return self.own

    @property
    def num_searches(self) -> int:
        return sum(problem is None for _, problem in self.read)

    @property
    def num_document_blocks(self) -> int:
        return self.text.count(RESPONSE_OPEN) - self.own.count(RESPONSE_OPEN)

    @property
    def searched(self) -> bool:
        return self.num_searches >= 1

    @property
    def blocks_balanced(self) -> bool:
        """Every call opened was closed, none of the environment's tags typed by the policy, and each search
        brought one tool turn."""
        own = self.own
        return (
            own.count(CALL_OPEN) == own.count(CALL_CLOSE) == len(self.calls)
            and RESPONSE_OPEN not in own
            and RESPONSE_CLOSE not in own
            and self.num_searches == self.num_document_blocks
        )

    @property
    def structure_ok(self) -> bool:
        """Every think block the policy opened it closed, in order, none left open."""
        depth = 0
        for tag in re.findall(f"{THINK_OPEN}|{THINK_CLOSE}", self.own):
            depth += 1 if tag == THINK_OPEN else -1
            if depth not in (0, 1):
                return False
        return depth == 0


def parse_solution(text: str) -> ParsedSolution:
    own = own_text(text)
    answers = _ANSWER.findall(own)
    return ParsedSolution(
        text=text,
        own=own,
        calls=tuple(_CALL.findall(own)),
        answer_opens=own.count(ANSWER_OPEN),
        answer_closes=own.count(ANSWER_CLOSE),
        answer=answers[-1].strip() if answers else None,
    )


@dataclass(frozen=True)
class ToolCallProtocol:
    """The protocol with one template's tool turn; `PROTOCOLS["tool-call"]` holds it with the ChatML turn."""

    turn: ToolTurn = field(default_factory=ToolTurn)
    NAME = NAME
    PROMPT = PROMPT
    PROMPT_END = PROMPT_END
    TOOLS = TOOLS
    INVALID_ACTION = INVALID_ACTION
    SEARCH_CLOSE = SEARCH_CLOSE
    STOP_OPENS = STOP_OPENS
    DOCUMENTS_OPEN = DOCUMENTS_OPEN
    DOCUMENTS_CLOSE = DOCUMENTS_CLOSE
    MULTI_QUERY = MULTI_QUERY
    CUT_AFTER: ClassVar[str | None] = None
    EPISODE_DEFAULTS: ClassVar[dict] = {}

    def with_template(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> ToolCallProtocol:
        return ToolCallProtocol(tool_turn(tokenizer, template_kwargs))

    def stops(self, stop_after_answer: bool) -> list[str]:
        return [CALL_CLOSE, ANSWER_CLOSE] if stop_after_answer else [CALL_CLOSE]

    def search_query(self, segment: str) -> str | None:
        """The query of the segment's last call; None when it has none or the call is malformed."""
        calls = _CALL.findall(own_text(segment))
        return read_call(calls[-1])[0] if calls else None

    def answered(self, segment: str) -> bool:
        return _ANSWER.search(own_text(segment)) is not None

    def policy_answer(self, solution: str) -> str | None:
        return parse_solution(solution).answer

    def scored_answer(self, prompt: str, solution: str) -> str | None:
        return parse_solution(solution).answer

    def passage_entry(self, passage: Passage, bare_title: bool = False) -> str:
        title = f"(Title: {passage.title}) " if passage.title else ""
        return f"{title}{passage.text}"

    def documents_block(self, entries: Sequence[str], after: str = "") -> str:
        lines = "\n".join(f"Doc {i} {entry}" for i, entry in enumerate(entries, start=1))
        return f"{self.turn.before}{lines}{self.turn.after}"

    def message_block(self, message: str, after: str = "") -> str:
        return f"{self.turn.before}{message.strip()}{self.turn.after}"

    def queries_block(
        self, queries: Sequence[str], documents: Sequence[Sequence[str]], empty: str, after: str = ""
    ) -> str:
        raise ValueError("the tool-call protocol sends one query a call")

    def from_r1_searcher(self, trajectory: str) -> str:
        """An R1-Searcher trajectory as a tool-calling policy writes it: each segment's reasoning in a think block,
        its query as a call, the final answer in `<answer>`; the documents left out (the environment appends its
        own tool turns)."""
        out = []
        for reasoning, query, answer in r1.recorded_turns(trajectory):
            thought = f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n"
            if query:
                call = json.dumps({"name": TOOL_NAME, "arguments": {QUERY_ARGUMENT: query}})
                out.append(f"{thought}{CALL_OPEN}\n{call}\n{CALL_CLOSE}")
            elif answer is not None:
                out.append(f"{thought}{ANSWER_OPEN} {answer} {ANSWER_CLOSE}")
            else:
                out.append(thought)
        return "".join(out)


DEFAULT = ToolCallProtocol()
