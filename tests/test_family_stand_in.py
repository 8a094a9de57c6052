"""The CPU rehearsal's stand-in tokenizer for a chat policy carries the checkpoint family's original chat template
(examples/chat_templates/), and the episode the agent appends in that family's form is the template's own rendering:
Qwen3.5's XML call and Llama 3.1's bare JSON call ended by its end of turn, whose tool turn must not write a second
`<|eot_id|>` after the one the policy generated (the agent once dropped that end of sequence from the action's text,
so the tool turn wrote it again)."""

from pathlib import Path

import pytest

from searchrl.config import load
from searchrl.paths import CONFIGS, EXAMPLES
from searchrl.protocols import get_protocol
from searchrl.protocols import tool_call as tc
from searchrl.rehearsal.episodes import RECORDINGS, replay_protocol, stand_in_chat_model
from searchrl.rollout.agent import action_text
from searchrl.rollout.engines import recorded_actions
from searchrl.stage.config import ModelConfig
from searchrl.stage.templates import load_tokenizer
from searchrl.tiny_policy.original_templates import CHECKPOINT_TEMPLATES, TEMPLATES, original_template

# (model config, original template, call form, the family's end of turn)
FAMILIES = [
    ("qwen3.5-9b", "qwen3_5_think.jinja", "xml-function", "<|im_end|>"),
    ("qwen3.5-9b-no-thinking", "qwen3_5_think.jinja", "xml-function", "<|im_end|>"),
    ("qwen3.6-35b-a3b", "qwen3_6.jinja", "xml-function", "<|im_end|>"),
    ("qwen3-8b", "qwen3.jinja", "hermes-json", "<|im_end|>"),
    ("llama3.1-8b-instruct", "llama3_1.jinja", "bare-json", "<|eot_id|>"),
    ("gemma-4-e2b-it", "gemma4.jinja", "gemma-call", "<turn|>"),
]


@pytest.fixture(scope="module")
def recording() -> str:
    import json

    return json.loads(RECORDINGS.read_text(encoding="utf-8").splitlines()[0])["gen_text_store"]


def test_every_listed_checkpoint_template_is_shipped():
    assert {name for _, name in CHECKPOINT_TEMPLATES} == {p.stem for p in TEMPLATES.glob("*.jinja")}
    assert original_template("Qwen/Qwen3.5-2B").name == "qwen3_5_nothink.jinja"
    assert original_template("Qwen/Qwen3.5-9B").name == "qwen3_5_think.jinja"
    assert original_template("Qwen/Qwen3-4B-Instruct-2507").name == "qwen3_instruct_2507.jinja"
    assert original_template("Qwen/Qwen3-8B").name == "qwen3.jinja"
    assert original_template("mistralai/Mistral-7B-Instruct-v0.3") is None


@pytest.mark.parametrize("config,template,form,end", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_the_stand_in_carries_the_original_template_and_replays_in_its_form(
    tmp_path, recording, config, template, form, end
):
    stand_in = stand_in_chat_model(str(CONFIGS / "models" / f"{config}.yaml"), tmp_path, "tool-call")
    assert stand_in is not None
    model = load(ModelConfig, stand_in)
    tokenizer = load_tokenizer(model)
    assert tokenizer.chat_template == (EXAMPLES / "chat_templates" / template).read_text(encoding="utf-8")
    assert tokenizer.eos_token == end
    protocol = replay_protocol("tool-call", stand_in)
    assert protocol.form.name == form and protocol.replay_problem is None
    segments = recorded_actions(protocol.from_r1_searcher(recording), protocol)
    assert len(segments) == 2 and protocol.search_query(segments[0]) == "last king Britain House Hanover died"
    assert "<answer> 20 June 1837 </answer>" in segments[1]


def test_an_unbound_protocol_replays_qwen3s_form_where_the_tokenizer_is_not_here(tmp_path):
    """A config whose tokenizer is neither here nor listed keeps the protocol unbound (Qwen3's JSON calls)."""
    text = Path(CONFIGS / "models" / "qwen3-8b.yaml").read_text().replace("Qwen/Qwen3-8B", "nobody/none")
    cfg = tmp_path / "m.yaml"
    cfg.write_text(text)
    assert replay_protocol("tool-call", str(cfg)) is get_protocol("tool-call")


@pytest.mark.parametrize("config", ["llama3.1-8b-instruct", "qwen3.5-9b"])
def test_the_appended_episode_is_the_templates_own_rendering(tmp_path, config):
    """Prompt tokens + the call as generated (its end of sequence included) + the tool turn the agent appends read
    as the template renders the same conversation: one end of turn between the call and the tool turn."""
    stand_in = stand_in_chat_model(str(CONFIGS / "models" / f"{config}.yaml"), tmp_path, "tool-call")
    model = load(ModelConfig, stand_in)
    tokenizer = load_tokenizer(model)
    protocol = replay_protocol("tool-call", stand_in)
    kwargs = model.chat_template_kwargs
    query, docs = "Citibank founder", "Doc 1 (Title: Citibank) Founded by Samuel Osgood."
    user = [{"role": "user", "content": "Who founded Citibank?"}]
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": query}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    if kwargs.get("enable_thinking"):
        turn["reasoning_content"] = "I look it up."
    render = tokenizer.apply_chat_template
    prompt = render(user, tools=tc.TOOLS, tokenize=False, add_generation_prompt=True, **kwargs)
    whole = render([*user, turn, {"role": "tool", "content": docs}], tools=tc.TOOLS, tokenize=False,
                   add_generation_prompt=True, **kwargs)  # fmt: skip
    assert whole.startswith(prompt)
    written = protocol.replay.write("I look it up." if kwargs.get("enable_thinking") else "", query, None)
    # What the engine returns: the call's tokens, the family's end of turn generated as the end of sequence.
    ids = tokenizer(written, add_special_tokens=False)["input_ids"]
    if protocol.form.stop == tokenizer.eos_token:
        assert written.endswith(tokenizer.eos_token) and ids[-1] == tokenizer.eos_token_id
    text = action_text(ids, tokenizer, protocol.stops(False))
    assert protocol.search_query(text) == query
    appended = protocol.documents_block([docs.removeprefix("Doc 1 ")], after=text)
    context = prompt + tokenizer.decode(ids, skip_special_tokens=False) + appended
    assert context == whole
    assert context.count("<|eot_id|>") == whole.count("<|eot_id|>")
