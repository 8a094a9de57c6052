"""The native tool-call protocol of chat models (`protocol: tool-call`), in each family's own call format.

Search is a function in the chat template's `tools` list. The policy calls it as its family writes calls (Qwen2.5's
and Qwen3's `<tool_call>\n{"name": "search", "arguments": {"query": "..."}}\n</tool_call>`, Qwen3.5's
`<function=search>`, Llama 3's bare JSON, gpt-oss's harmony header, Gemma 4's, GLM-4's: `tool_families.py`), read
with transformers' `parse_response`; the result comes back as the template's own `tool` turn; the final answer goes
in `<answer>`, as in the other protocols. A call that cannot be read, names another function or lacks its query is
no search: the episode ends there and the reward names the problem (`violation_tool_call`).

`with_template` finds the family from what the tokenizer's chat template renders for a call of `search`, and
derives its tool turn and how its policy writes a recorded trajectory's turns (the rehearsal's replay), once per
process. Without a tokenizer (the reward server, config checks) the protocol holds Qwen's ChatML turn and the reward
reads every family's calls and tool turns; a template whose call or turn it could not read is refused when it is
bound, with the reason.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from searchrl.protocols import r1_searcher as r1
from searchrl.protocols.segments import split_solution
from searchrl.protocols.tool_families import FORMS, HERMES_JSON, RESPONSE_MARKERS, TOOL_TURNS, CallForm
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

_CALL = HERMES_JSON.call
_ANSWER = re.compile(f"{ANSWER_OPEN}(.*?){ANSWER_CLOSE}", re.DOTALL)
# The markers of calls whose open and close are tags of their own: each opened must be closed.
_CALL_PAIRS = (("<tool_call>", "</tool_call>"), ("<|tool_call>", "<tool_call|>"), ("to=functions.", "<|call|>"))
# A tool result that the JSON-encoding templates (Llama 3, gpt-oss) show escaped: the binding tells which.
_SENTINEL = 'searchrl "tool"\nresult'
_PROBE_QUERY = "searchrl probe"
# The marks a replay's forms are cut at; the query holds quotes, a backslash and a non-ASCII letter, so how the
# template writes it tells how it encodes one.
_REASONING_MARK, _ANSWER_MARK = "searchrl reasoning", "searchrl answer"
_REPLAY_QUERY = 'searchrl "replay" \\ \u00e9'
_QUERY_ENCODINGS = {
    "json": lambda q: json.dumps(q, ensure_ascii=False)[1:-1],
    "json-ascii": lambda q: json.dumps(q)[1:-1],
    "raw": lambda q: q,
}


def _checked(name: Any, arguments: Any) -> tuple[str | None, str | None]:
    if name != TOOL_NAME:
        return None, f"unknown function {str(name)[:40]!r}"
    if isinstance(arguments, str):  # some templates and models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None, "bad JSON"
    query = arguments.get(QUERY_ARGUMENT) if isinstance(arguments, dict) else None
    if not isinstance(query, str) or not query.strip():
        return None, f"missing argument {QUERY_ARGUMENT!r}"
    return " ".join(query.split()), None


def read_call(body: str) -> tuple[str | None, str | None]:
    """The query of one JSON call's body, or the problem that makes it no search: not JSON, another function, no
    query."""
    return read_span(f"{CALL_OPEN}{body}{CALL_CLOSE}", HERMES_JSON)


def read_span(span: str, form: CallForm, reader: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
    """One call as its family writes it, read by transformers' `parse_response` with `reader` (the checkpoint's own
    response template) or the form's; the query, or the problem that makes it no search."""
    from transformers.utils.chat_parsing import parse_response

    try:
        message = parse_response(span, reader or form.template, prefix="")
    except ValueError:
        return None, form.unreadable
    calls = message.get("tool_calls")
    call = (calls[0] if calls else None) if isinstance(calls, list) else calls
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return None, form.unreadable
    return _checked(function.get("name"), function.get("arguments", function.get("parameters")))


def _form_of(span: str, body: str) -> CallForm:
    if span.startswith(CALL_OPEN):
        for form in FORMS.values():
            if form.call is _CALL and form.shape is not None and form.shape.search(body):
                return form
        return HERMES_JSON
    return next(f for f in FORMS.values() if f.call is not _CALL and f.call.fullmatch(span))


def find_calls(own: str, form: CallForm | None = None) -> list[tuple[str, CallForm]]:
    """Every complete call in the policy's own text, in order, with its form: `form`'s calls only, or (the reward,
    which has no tokenizer) those of every family."""
    if form is not None:
        return [(m.group(0), form) for m in form.call.finditer(own) if _form_of(m.group(0), _body(m)) is form]
    found = {m.start(): m for f in FORMS.values() for m in f.call.finditer(own)}
    return [(found[at].group(0), _form_of(found[at].group(0), _body(found[at]))) for at in sorted(found)]


def _body(m: re.Match[str]) -> str:
    return m.group(1) if m.re.groups else m.group(0)


# gpt-oss starts each message of its turn (analysis, call, final answer) with this: structure, not a role it plays.
_HARMONY_NEXT = "<|end|><|start|>assistant"


def own_text(text: str) -> str:
    """The policy's own text: the tool turns the environment appended left out (a think block a turn opens kept)."""
    own = TOOL_TURNS.sub(lambda m: m.group("open") or "", text)
    return own.replace(_HARMONY_NEXT, "<|end|>") if _HARMONY_NEXT in own else own


def _document_blocks(text: str) -> int:
    return sum(max(1, m.group(0).count(RESPONSE_OPEN)) for m in TOOL_TURNS.finditer(text))


@dataclass(frozen=True)
class ToolTurn:
    """What the environment appends after a call, around the results: the template's turn, split at the results;
    `escaped`: the template writes the result as a JSON string."""

    before: str = "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
    after: str = "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    escaped: bool = False

    def around(self, content: str, after: str = "") -> str:
        # Where the call ends at the end of the turn (Llama 3's `<|eot_id|>`), the segment may already hold it.
        before = self.before
        for end in ("<|eot_id|>",):
            if after.endswith(end) and before.startswith(end):
                before = before[len(end) :]
        return f"{before}{json.dumps(content)[1:-1] if self.escaped else content}{self.after}"


def _render(tokenizer: Any, arguments: Any, kwargs: dict[str, Any]) -> str:
    call = {"type": "function", "function": {"name": TOOL_NAME, "arguments": arguments}}
    messages = [
        {"role": "user", "content": "?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": _SENTINEL},
    ]
    return tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs)


def bind(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> tuple[CallForm, ToolTurn]:
    """The call form and tool turn of the tokenizer's chat template, read from what it renders for a call of
    `search` and its result; an error naming the reason when the template lists no tools, renders no call the
    protocol reads back, or a tool turn the reward cannot read."""
    kwargs = {k: v for k, v in (template_kwargs or {}).items() if k != "tools"}
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "?"}], tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
    )
    arguments = {QUERY_ARGUMENT: _PROBE_QUERY}
    try:
        rendered = _render(tokenizer, arguments, kwargs)
    except (TypeError, ValueError):
        # DeepSeek-V3's template concatenates the arguments as a JSON string.
        rendered = _render(tokenizer, json.dumps(arguments), kwargs)
    escaped = _SENTINEL not in rendered and json.dumps(_SENTINEL)[1:-1] in rendered
    result = json.dumps(_SENTINEL)[1:-1] if escaped else _SENTINEL
    at = rendered.find(result)
    calls = [c for c in find_calls(rendered[: max(at, 0)]) if read_span(*c)[0] == _PROBE_QUERY]
    listed = TOOL_NAME in prompt.replace("?", "")
    if not calls or at < 0 or not listed:
        # DeepSeek-V3's template renders a call of its own format but never the tools list: the policy could not
        # know the function, so the reason names both.
        unlisted = "; nor does it render the `tools` list into the prompt" if not listed else ""
        raise ValueError(
            f"protocol tool-call: the tokenizer's chat template renders no {CALL_CLOSE} call or no tool result "
            f"that the protocol reads{unlisted}; use a chat model whose template has tools (docs/REWARDS.md lists "
            "the families), or another protocol"
        )
    span, form = calls[-1]
    turn = ToolTurn(rendered[rendered.rindex(span, 0, at) + len(span) : at], rendered[at + len(result) :], escaped)
    if TOOL_TURNS.fullmatch(turn.around("Doc 1 x")) is None:
        raise ValueError(
            f"protocol tool-call: the chat template's tool turn {turn.before}...{turn.after!r} is not one the "
            "reward can read"
        )
    return form, turn


def tool_turn(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> ToolTurn:
    """The tool turn as the tokenizer's chat template renders it after a search call, with a new assistant turn."""
    return bind(tokenizer, template_kwargs)[1]


@dataclass(frozen=True)
class Replay:
    """How a bound template's policy writes the turns of a recorded trajectory, each as the text around its slots:
    `call` before the reasoning, between it and the query, after the query (through the call's stop); `answer` before
    the reasoning and between it and the answer; `thought` around reasoning that neither calls nor answers.
    `reasons`: the template's thinking is on (or its family always reasons); off, the reasoning is left out."""

    call: tuple[str, str, str]
    answer: tuple[str, str]
    thought: tuple[str, str]
    reasons: bool
    encoding: str  # how the call writes its query: a key of _QUERY_ENCODINGS

    def search(self, reasoning: str, query: str) -> str:
        before, between, after = self.call
        return f"{before}{reasoning if self.reasons else ''}{between}{_QUERY_ENCODINGS[self.encoding](query)}{after}"

    def final(self, reasoning: str, answer: str) -> str:
        before, between = self.answer
        return f"{before}{reasoning if self.reasons else ''}{between}{ANSWER_OPEN} {answer} {ANSWER_CLOSE}"

    def unfinished(self, reasoning: str) -> str:
        return f"{self.thought[0]}{reasoning}{self.thought[1]}"

    def write(self, reasoning: str, query: str | None, answer: str | None) -> str:
        """One recorded turn (`r1_searcher.recorded_turns`): a search, else an answer, else the reasoning alone."""
        if query:
            return self.search(reasoning, query)
        return self.final(reasoning, answer) if answer is not None else self.unfinished(reasoning)


# Qwen3's with thinking on, as the unbound protocol has always replayed a recording: the JSON call's query as
# `json.dumps` writes it (ASCII-escaped), the answer after a think block like the call's.
_QWEN_THINK = (f"{THINK_OPEN}\n", f"\n{THINK_CLOSE}\n\n")
QWEN_REPLAY = Replay(
    call=(
        _QWEN_THINK[0],
        f'{_QWEN_THINK[1]}{CALL_OPEN}\n{{"name": "{TOOL_NAME}", "arguments": {{"{QUERY_ARGUMENT}": "',
        f'"}}}}\n{CALL_CLOSE}',
    ),
    answer=_QWEN_THINK,
    thought=_QWEN_THINK,
    reasons=True,
    encoding="json-ascii",
)


def _written(context: str, rendered: str) -> str:
    """What the policy writes after the generation prompt `context` for the turn that `rendered` ends with. Where
    the template re-renders its own prompt otherwise (Qwen3 drops the empty think block it closed), the common part
    ends at the last line or tag before they differ, not inside a tag both happen to start alike."""
    at = len(os.path.commonprefix([context, rendered]))
    if at < len(context):
        at = max(context.rfind("\n", 0, at), context.rfind(">", 0, at)) + 1
    return rendered[at:]


def _cut(text: str, mark: str) -> tuple[str, str]:
    at = text.find(mark)
    if at < 0:
        raise ValueError(f"the template's rendering leaves out {mark!r}")
    return text[:at], text[at + len(mark) :]


def replay_form(tokenizer: Any, form: CallForm, template_kwargs: dict[str, Any] | None = None) -> Replay:
    """The turns of a recorded trajectory as the template renders them: a call of `search` and a final answer,
    each after the generation prompt the policy continues, with reasoning where the thinking switch is on; a
    ValueError where a form cannot be read off the rendering."""
    kwargs = {k: v for k, v in (template_kwargs or {}).items() if k != "tools"}

    def render(messages: list[dict[str, Any]], generate: bool = True, **switch: Any) -> str:
        return tokenizer.apply_chat_template(
            messages, tools=TOOLS, tokenize=False, add_generation_prompt=generate, **{**kwargs, **switch}
        )

    def assistant(reasoning: str | None, content: str = "", query: str | None = None) -> dict[str, Any]:
        turn: dict[str, Any] = {"role": "assistant", "content": content}
        if query is not None:
            function = {"name": TOOL_NAME, "arguments": {QUERY_ARGUMENT: query}}
            turn["tool_calls"] = [{"type": "function", "function": function}]
        if reasoning is not None:  # gpt-oss reads `thinking`, the others `reasoning_content`
            turn["reasoning_content"] = turn["thinking"] = reasoning
        return turn

    user, tool = {"role": "user", "content": "?"}, {"role": "tool", "content": _SENTINEL}
    prompt = render([user])
    # Templates render past reasoning whatever the switch: whether the policy reasons now is what the switch does
    # to the generation prompt; a template the switch leaves alone reasons where it renders reasoning (gpt-oss).
    on, off = render([user], enable_thinking=True), render([user], enable_thinking=False)
    reasoned = _written(prompt, render([user, assistant(_REASONING_MARK, query=_REPLAY_QUERY), tool]))
    reasons = _REASONING_MARK in reasoned and (on == off or prompt == on)
    written = reasoned if reasons else _written(prompt, render([user, assistant(None, query=_REPLAY_QUERY), tool]))
    calls = find_calls(written, form)
    if not calls:
        raise ValueError(f"the template renders no {form.name} call to replay")
    span_at = written.index(calls[0][0])
    call = written[: written.index(form.stop, span_at) + len(form.stop)]
    encoding = next((k for k, encode in _QUERY_ENCODINGS.items() if encode(_REPLAY_QUERY) in calls[0][0]), None)
    if encoding is None:
        raise ValueError("the template writes the query in an encoding the replay does not know")
    head, after = _cut(call, _QUERY_ENCODINGS[encoding](_REPLAY_QUERY))
    before, between = _cut(head, _REASONING_MARK) if reasons else ("", head)
    opened = (before, call[len(before) + len(_REASONING_MARK) : span_at]) if reasons else ("", "")

    # The answer after a tool turn, the history's call without reasoning: gpt-oss drops a call's analysis from
    # history once a final answer follows, which would make the history differ from the prompt the policy saw.
    history = [user, assistant(None, query=_PROBE_QUERY), tool]
    context = render(history)
    lead = _cut(
        _written(context, render([*history, assistant(_REASONING_MARK if reasons else None, _ANSWER_MARK)], False)),
        _ANSWER_MARK,
    )[0]
    if not reasons:
        answer = ("", lead)
    elif _REASONING_MARK in lead:
        answer = _cut(lead, _REASONING_MARK)
    else:
        # Gemma 4 renders reasoning only before calls: the policy writes it before its answer as it does there.
        plain = _cut(_written(context, render([*history, assistant(None, _ANSWER_MARK)], False)), _ANSWER_MARK)[0]
        answer = opened[0], opened[1] + plain
    replay = Replay((before, between, after), answer, opened, reasons, encoding)
    probe = find_calls(own_text(replay.search("", _PROBE_QUERY)), form)
    if not probe or read_span(probe[-1][0], form)[0] != _PROBE_QUERY:
        raise ValueError(f"the replayed {form.name} call does not read back")
    return replay


@dataclass(frozen=True)
class ParsedSolution:
    text: str
    own: str
    calls: tuple[str, ...]  # every complete call the policy wrote, as it wrote it
    answer_opens: int
    answer_closes: int
    answer: str | None
    forms: tuple[CallForm, ...] = ()  # each call's form (the JSON one where not given)
    ANSWER_FORBIDDEN = (CALL_OPEN, CALL_CLOSE, RESPONSE_OPEN, RESPONSE_CLOSE, THINK_OPEN, THINK_CLOSE)

    @cached_property
    def read(self) -> list[tuple[str | None, str | None]]:
        forms = self.forms or (HERMES_JSON,) * len(self.calls)
        return [read_span(span, form) for span, form in zip(self.calls, forms, strict=True)]

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
        return _document_blocks(self.text)

    @property
    def searched(self) -> bool:
        return self.num_searches >= 1

    @property
    def blocks_balanced(self) -> bool:
        """Every call opened was closed, none of the environment's markers typed by the policy, and each search
        brought one tool turn."""
        own = self.own
        delimited = sum(not span.startswith("{") for span in self.calls)
        return (
            sum(own.count(o) for o, _ in _CALL_PAIRS) == sum(own.count(c) for _, c in _CALL_PAIRS) == delimited
            and not any(marker in own for marker in RESPONSE_MARKERS)
            and self.num_searches == self.num_document_blocks
        )

    @property
    def structure_ok(self) -> bool:
        """Every think block the policy opened it closed, in order, none left open; a first tag that closes one
        closes the block the template's generation prompt opened (Qwen3.5's, Nemotron 3's with thinking on)."""
        tags = re.findall(f"{THINK_OPEN}|{THINK_CLOSE}", self.own)
        depth = 1 if tags[:1] == [THINK_CLOSE] else 0
        for tag in tags:
            depth += 1 if tag == THINK_OPEN else -1
            if depth not in (0, 1):
                return False
        return depth == 0


def parse_solution(text: str, form: CallForm | None = None) -> ParsedSolution:
    """The solution as the reward reads it: `form`'s calls, or (no tokenizer) every family's."""
    own = own_text(text)
    answers = _ANSWER.findall(own)
    calls = find_calls(own, form)
    return ParsedSolution(
        text=text,
        own=own,
        calls=tuple(span for span, _ in calls),
        answer_opens=own.count(ANSWER_OPEN),
        answer_closes=own.count(ANSWER_CLOSE),
        answer=answers[-1].strip() if answers else None,
        forms=tuple(f for _, f in calls),
    )


@dataclass(frozen=True)
class ToolCallProtocol:
    """The protocol with one template's call form and tool turn; `PROTOCOLS["tool-call"]` holds Qwen's (JSON calls,
    the ChatML turn). `reader`: the checkpoint's own response template, where its tokenizer has one."""

    turn: ToolTurn = field(default_factory=ToolTurn)
    form: CallForm = HERMES_JSON
    reader: dict[str, Any] | None = None
    # How the bound template writes a recorded trajectory's turns; `replay_problem`: why it could not be read off.
    replay: Replay = QWEN_REPLAY
    replay_problem: str | None = None
    NAME = NAME
    PROMPT = PROMPT
    PROMPT_END = PROMPT_END
    TOOLS = TOOLS
    INVALID_ACTION = INVALID_ACTION
    MULTI_QUERY = MULTI_QUERY
    CUT_AFTER: ClassVar[str | None] = None
    EPISODE_DEFAULTS: ClassVar[dict] = {}
    # No paper of its own: R1-Searcher's evaluation settings, one query a call.
    EVAL_EPISODE: ClassVar[dict | None] = {"top_k": 5, "max_searches": 16, "max_segment_tokens": 512}
    REWARD_FORMULAS: ClassVar[tuple[str, ...]] = ("searchrl",)
    ROUTER_TAGS: ClassVar[dict[str, tuple[str, str]] | None] = None
    WARM_START: ClassVar[str | None] = None

    @property
    def SEARCH_CLOSE(self) -> str:  # noqa: N802 - the TagProtocol attribute every protocol spells so
        return self.form.stop

    @property
    def STOP_OPENS(self) -> dict[str, str]:  # noqa: N802
        # A call ended by the end of the turn (Llama 3) is not closed by appending it: the tool turn writes it.
        call = {} if self.form.stop == "<|eot_id|>" else {self.form.stop: self.form.opener}
        return {**call, ANSWER_CLOSE: ANSWER_OPEN}

    @property
    def DOCUMENTS_OPEN(self) -> str:  # noqa: N802
        return self.form.documents_open

    @property
    def DOCUMENTS_CLOSE(self) -> str:  # noqa: N802
        return self.form.documents_close

    def with_template(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> ToolCallProtocol:
        form, turn = bind(tokenizer, template_kwargs)
        from jinja2 import TemplateError

        reader = getattr(tokenizer, "response_template", None)
        try:
            replay = replay_form(tokenizer, form, template_kwargs)
        except (TemplateError, TypeError, ValueError) as e:
            # Training needs only the call and the tool turn; the rehearsal's replay is refused when it asks.
            return ToolCallProtocol(turn, form, reader, replay_problem=str(e))
        return ToolCallProtocol(turn, form, reader, replay)

    def stops(self, stop_after_answer: bool) -> list[str]:
        return [self.form.stop, ANSWER_CLOSE] if stop_after_answer else [self.form.stop]

    def search_query(self, segment: str) -> str | None:
        """The query of the segment's last call in the bound family's form; None when it has none or the call is
        malformed."""
        calls = find_calls(own_text(segment), self.form)
        return read_span(calls[-1][0], self.form, self.reader)[0] if calls else None

    def answered(self, segment: str) -> bool:
        return _ANSWER.search(own_text(segment)) is not None

    def policy_answer(self, solution: str) -> str | None:
        return parse_solution(solution).answer

    def parse_solution(self, text: str) -> ParsedSolution:
        """The solution as the reward reads it: every family's calls (the reward server holds no tokenizer)."""
        return parse_solution(text)

    def split_solution(self, query: str, prompt: str) -> str:
        return split_solution(query, prompt)

    def episode_problem(self, episode: Any) -> str | None:
        return None

    def scored_answer(self, prompt: str, solution: str) -> str | None:
        return parse_solution(solution).answer

    def passage_entry(self, passage: Passage, bare_title: bool = False) -> str:
        title = f"(Title: {passage.title}) " if passage.title else ""
        return f"{title}{passage.text}"

    def documents_block(self, entries: Sequence[str], after: str = "") -> str:
        lines = "\n".join(f"Doc {i} {entry}" for i, entry in enumerate(entries, start=1))
        return self.turn.around(lines, after)

    def message_block(self, message: str, after: str = "") -> str:
        return self.turn.around(message.strip(), after)

    def queries_block(
        self, queries: Sequence[str], documents: Sequence[Sequence[str]], empty: str, after: str = ""
    ) -> str:
        raise ValueError("the tool-call protocol sends one query a call")

    def from_r1_searcher(self, trajectory: str) -> str:
        """An R1-Searcher trajectory as a tool-calling policy writes it: each segment's reasoning, its query as a
        call and the final answer in `<answer>`, in the bound template's form (unbound, Qwen3's: a think block and
        a JSON call); the documents left out (the environment appends its own tool turns)."""
        if self.replay_problem is not None:
            raise ValueError(
                f"protocol tool-call: cannot replay a recording in this template's form: {self.replay_problem}"
            )
        return "".join(self.replay.write(*turn) for turn in r1.recorded_turns(trajectory))


DEFAULT = ToolCallProtocol()
