"""The tool-call protocol on the original chat templates of today's open families (examples/chat_templates/,
from TRL's wheel), each on a tiny local tokenizer: the binding finds the family's call form, the call the template
renders for `search(query=Q)` reads back as Q, the documents come back as the template's own tool turn, the episode
the agent builds is what the template renders for it, and the reward pays a clean call and a right answer in full."""

import json
import os

import pytest

from searchrl.protocols import bind_template, get_protocol
from searchrl.protocols import tool_call as tc
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import RewardSpec
from searchrl.tiny_policy.model import build_tokenizer
from tests.conftest import ROOT

TEMPLATES = ROOT / "examples/chat_templates"
QUERY = "Citibank founder"
DOCS = "Doc 1 (Title: Citibank) Citibank was founded in 1812 by Samuel Osgood."
REASONING = "I should look it up."
ANSWER = "<answer> Samuel Osgood </answer>"
ON, OFF = {"enable_thinking": True}, {"enable_thinking": False}
FULL = 1.0  # the default spec's reward for a clean search and a right answer (the gaming table's first row)

# (template file, switches, call form, what the policy writes after the tool turn to answer). Thinking on: the policy
# reasons before its call (the template's reasoning field) and before its answer.
CASES = [
    ("qwen2_5", {}, "hermes-json", ANSWER),
    ("qwen3", ON, "hermes-json", f"<think>\n{REASONING}\n</think>\n\n{ANSWER}"),
    ("qwen3", OFF, "hermes-json", ANSWER),
    ("qwen3_instruct_2507", {}, "hermes-json", ANSWER),
    ("qwen3_5_think", ON, "xml-function", f"{REASONING}\n</think>\n\n{ANSWER}"),
    ("qwen3_5_think", OFF, "xml-function", ANSWER),
    ("qwen3_5_nothink", ON, "xml-function", f"{REASONING}\n</think>\n\n{ANSWER}"),
    ("qwen3_5_nothink", OFF, "xml-function", ANSWER),
    ("qwen3_6", ON, "xml-function", f"{REASONING}\n</think>\n\n{ANSWER}"),
    ("qwen3_6", OFF, "xml-function", ANSWER),
    ("qwen3_8", ON, "xml-function", f"{REASONING}\n</think>\n\n{ANSWER}"),
    ("qwen3_8", OFF, "xml-function", ANSWER),
    ("nemotron_3_nano", ON, "xml-function", f"{REASONING}\n</think>\n{ANSWER}"),
    ("nemotron_3_nano", OFF, "xml-function", ANSWER),
    ("nemotron_3_super", ON, "xml-function", f"{REASONING}\n</think>\n{ANSWER}"),
    ("nemotron_3_super", OFF, "xml-function", ANSWER),
    ("llama3_1", {}, "bare-json", ANSWER),
    ("llama3_2", {}, "bare-json", ANSWER),
    ("gemma4", ON, "gemma-call", f"<|channel>thought\n{REASONING}\n<channel|>{ANSWER}"),
    ("gemma4", OFF, "gemma-call", ANSWER),
    ("glm4moe", ON, "arg-key", f"\n<think>{REASONING}</think>\n{ANSWER}"),
    ("glm4moe", OFF, "arg-key", f"\n{ANSWER}"),
    (
        "gptoss",
        {},
        "harmony",
        f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}",
    ),
]
IDS = [f"{name}-{'on' if kw == ON else 'off' if kw == OFF else 'none'}" for name, kw, _, _ in CASES]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(["Citibank was founded in 1812 by Samuel Osgood."], protocol_tokens=False, qwen_split=True)


def with_template(tokenizer, name):
    tokenizer.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return tokenizer


def conversation(kwargs, thinking: bool, tool_content: str | None = DOCS):
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": QUERY}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    if thinking:
        turn["reasoning_content"] = REASONING
    messages = [{"role": "user", "content": "Who founded Citibank?"}, turn]
    return messages + ([{"role": "tool", "content": tool_content}] if tool_content is not None else [])


def render(tokenizer, messages, kwargs):
    return tokenizer.apply_chat_template(
        messages, tools=tc.TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
    )


@pytest.mark.parametrize("name,kwargs,form,answer", CASES, ids=IDS)
def test_each_family_binds_reads_its_call_returns_its_tool_turn_and_is_paid(tokenizer, name, kwargs, form, answer):
    tok = with_template(tokenizer, name)
    protocol = bind_template(get_protocol("tool-call"), tok, kwargs)
    assert protocol.form.name == form and protocol.SEARCH_CLOSE in protocol.stops(False)
    thinking = kwargs == ON or name == "gptoss"
    prompt = render(tok, conversation(kwargs, thinking)[:1], kwargs)
    rendered = render(tok, conversation(kwargs, thinking), kwargs)
    block = protocol.documents_block([DOCS.removeprefix("Doc 1 ")])
    # The template's own tool turn around the documents, and everything before it is the prompt the model saw and
    # the turn it wrote: appending the turn keeps the model's context a prefix of the template's rendering.
    if name == "qwen3" and kwargs == OFF:
        # Qwen3's template drops the empty think block of past turns (not prefix-preserving): the agent appends the
        # same tool turn; only the template's re-rendering of history differs.
        assert prompt.endswith("<think>\n\n</think>\n\n") and rendered.startswith(
            prompt.removesuffix("<think>\n\n</think>\n\n")
        )
        segment = rendered[len(prompt) - len("<think>\n\n</think>\n\n") : len(rendered) - len(block)]
    else:
        assert rendered.startswith(prompt)
        segment = rendered[len(prompt) : len(rendered) - len(block)]
    assert rendered.endswith(block)
    assert protocol.search_query(segment) == QUERY
    # The reward, which has no tokenizer, reads every family: a clean call and a right answer are paid in full.
    solution = segment + protocol.documents_block([DOCS.removeprefix("Doc 1 ")], after=segment) + answer
    scored = score_solution(solution, ["Samuel Osgood"], RewardSpec(protocol="tool-call"), {"num_searches": 1})
    violations = {k: v for k, v in scored.logs.items() if k.startswith("violation_") and v}
    assert not violations and scored.logs["em"] == 1.0 and scored.logs["format_ok"] == 1.0
    assert scored.reward == FULL
    parsed = tc.parse_solution(solution)
    assert parsed.num_searches == parsed.num_document_blocks == 1 and parsed.answer == "Samuel Osgood"


@pytest.mark.parametrize("name,kwargs,form,answer", CASES, ids=IDS)
def test_a_malformed_call_in_each_family_is_the_named_violation(tokenizer, name, kwargs, form, answer):
    tok = with_template(tokenizer, name)
    protocol = bind_template(get_protocol("tool-call"), tok, kwargs)
    call = conversation(kwargs, False)[1]
    call["tool_calls"][0]["function"]["arguments"] = {"q": QUERY}
    prompt = render(tok, conversation(kwargs, False)[:1], kwargs)
    rendered = render(tok, [conversation(kwargs, False)[0], call], kwargs)
    # Past the prompt: Qwen's system turn shows a call's shape as an example.
    (span,) = [
        s for s, f in tc.find_calls(rendered[len(os.path.commonprefix([prompt, rendered])) :]) if f.name == form
    ]
    assert protocol.search_query(span) is None
    scored = score_solution(span, ["Samuel Osgood"], RewardSpec(protocol="tool-call"), {"num_searches": 0})
    assert scored.logs["violation_tool_call"] == 1.0 and tc.parse_solution(span).call_problems == [
        "missing argument 'query'"
    ]


def test_deepseek_v3_is_refused_with_the_reason(tokenizer):
    tok = with_template(tokenizer, "deepseekv3")
    with pytest.raises(ValueError, match="nor does it render the `tools` list into the prompt"):
        bind_template(get_protocol("tool-call"), tok, {})


def test_a_checkpoints_own_response_template_reads_the_call(tokenizer):
    """A tokenizer that carries a `response_template` is read with it, not with ours."""
    tok = with_template(tokenizer, "qwen3_6")
    tok.response_template = {
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "tool_calls": {
                "open_pattern": r"<tool_call>\s*<function=(?P<name>[^>\n]+)>",
                "close_pattern": r"</tool_call>\s*",
                "content": "xml-inline",
                "content_args": {"tag_pattern": r"<parameter=(?P<key>[^>\n]+)>\n(?P<value>.*?)\n</parameter>"},
                "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
            },
            "content": {},
        },
    }
    try:
        protocol = bind_template(get_protocol("tool-call"), tok, OFF)
        assert protocol.reader is tok.response_template
        span = "<tool_call>\n<function=search>\n<parameter=query>\nOsgood\n</parameter>\n</function>\n</tool_call>"
        assert protocol.search_query(span) == "Osgood"
    finally:
        del tok.response_template


def test_json_encoding_templates_get_escaped_documents(tokenizer):
    """Llama 3 and gpt-oss write a tool result as a JSON string: quotes and newlines in passages come back escaped,
    as their templates render them."""
    for name in ("llama3_1", "gptoss"):
        tok = with_template(tokenizer, name)
        protocol = bind_template(get_protocol("tool-call"), tok, {})
        docs = 'Doc 1 (Title: "Citi") one\nDoc 2 (Title: Osgood) two'
        assert protocol.turn.escaped
        assert render(tok, conversation({}, False, docs), {}).endswith(protocol.message_block(docs))


def test_the_reward_reads_qwen_calls_as_before():
    """Unbound (the reward server), the protocol reads Qwen's JSON calls with the same problems as before."""
    body = json.dumps({"name": "search", "arguments": {"query": "Citibank"}})
    assert tc.read_call(f"\n{body}\n") == ("Citibank", None)
    assert tc.read_call('\n"search"\n') == (None, "bad JSON")
    assert tc.read_call('\n{"name": "lookup", "arguments": {}}\n') == (None, "unknown function 'lookup'")


@pytest.mark.parametrize(
    "config,template",
    [
        ("qwen3.5-9b", "qwen3_5_think"),
        ("qwen3.5-9b-no-thinking", "qwen3_5_think"),
        ("qwen3.6-35b-a3b", "qwen3_6"),
        ("qwen3.6-35b-a3b-no-thinking", "qwen3_6"),
        ("gemma-4-e2b-it", "gemma4"),
    ],
)
def test_the_new_model_configs_render_both_protocols_on_their_templates(tokenizer, tmp_path, config, template):
    """Each chat config on its family's original template: R1-Searcher's prompt ends opening <think>, and under
    tool-call the prompt lists search and the binding reads the family's calls with the config's thinking switch."""
    from searchrl.config import load
    from searchrl.stage.config import ModelConfig
    from searchrl.stage.templates import load_tokenizer, protocol_model, render_prompt

    with_template(tokenizer, template).save_pretrained(tmp_path)
    model = load(ModelConfig, ROOT / f"configs/models/{config}.yaml")
    model = model.model_copy(update={"model_path": str(tmp_path)})
    tok = load_tokenizer(model)
    r1 = render_prompt(model, "Who founded Citibank?", tok)
    tail = r1.rsplit("Who founded Citibank?", 1)[1]  # the system turn quotes the tags
    assert r1.rstrip().endswith("<think>") and tail.count("<think>") - tail.count("</think>") == 1
    native = protocol_model(model, "tool-call")
    assert "search" in render_prompt(native, "Who founded Citibank?", tok, None)
    protocol = bind_template(get_protocol("tool-call"), tok, native.chat_template_kwargs)
    assert protocol.form.name == ("gemma-call" if template == "gemma4" else "xml-function")


@pytest.mark.parametrize("config", ["qwen3.5-9b-base", "qwen3.6-35b-a3b-base"])
def test_the_new_base_configs_are_refused_a_native_tool_call(config):
    from searchrl.config import load
    from searchrl.stage.config import ModelConfig
    from searchrl.stage.templates import protocol_model, render_prompt

    model = load(ModelConfig, ROOT / f"configs/models/{config}.yaml")
    assert render_prompt(model, "Who founded Citibank?").endswith("Assistant: <think>")
    with pytest.raises(ValueError, match="base model; a native tool call needs a chat model"):
        protocol_model(model, "tool-call")


@pytest.mark.parametrize("name,kwargs,form,answer", CASES, ids=IDS)
def test_a_two_call_episode_appended_turn_by_turn_is_the_templates_rendering(tokenizer, name, kwargs, form, answer):
    """Issue 63 item 2: the agent appends each call and tool turn to what the model saw; for two calls in a row that
    context is the template's own rendering of the conversation, with each call's reasoning kept where thinking is on
    (no family drops it between the calls of one turn). Qwen3 with thinking off is the one exception: its history
    leaves out the empty think block the generation prompt closed, which the model saw and the agent keeps."""
    tok = with_template(tokenizer, name)
    protocol = bind_template(get_protocol("tool-call"), tok, kwargs)
    turns = [
        ("First I search.", "Citibank", "(Title: Citibank) A bank."),
        (REASONING, QUERY, DOCS.removeprefix("Doc 1 ")),
    ]
    messages = [{"role": "user", "content": "Who founded Citibank?"}]
    context = render(tok, messages, kwargs)
    for reasoning, query, docs in turns:
        segment = protocol.replay.search(reasoning, query)
        context += segment + protocol.documents_block([docs], after=segment)
        call = {"type": "function", "function": {"name": "search", "arguments": {"query": query}}}
        turn = {"role": "assistant", "content": "", "tool_calls": [call]}
        if protocol.replay.reasons:
            turn["reasoning_content"] = turn["thinking"] = reasoning
        messages += [turn, {"role": "tool", "content": f"Doc 1 {docs}"}]
    rendered = render(tok, messages, kwargs)
    if name == "qwen3" and kwargs == OFF:
        assert context.replace("<think>\n\n</think>\n\n", "") == rendered.replace("<think>\n\n</think>\n\n", "")
        assert context.count("<think>\n\n</think>") == 3 and rendered.count("<think>\n\n</think>") == 1
        return
    assert context == rendered
    assert ("First I search." in context) is protocol.replay.reasons
