"""R1-Searcher's recorded trajectories replayed as each family's policy writes them (the CPU rehearsal's engine): bound
to a family's original template, every call is the one that template renders for the recorded query, the reasoning
is there only where its thinking switch is on, and the answer is written as the families test says the family writes
it; cut into segments as the replay engine cuts them, the queries read back in order and the episode is paid in
full. Unbound, the protocol replays Qwen3's form byte for byte as before."""

import hashlib
import json

import pytest

from searchrl.protocols import bind_template, get_protocol
from searchrl.protocols import r1_searcher as r1
from searchrl.protocols import tool_call as tc
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import RewardSpec
from searchrl.rollout.engines import recorded_actions
from tests.conftest import FIXTURES
from tests.test_tool_call_families import ANSWER, CASES, DOCS, FULL, IDS, ON, REASONING, render, with_template

RECORDINGS = FIXTURES / "r1searcher/bamboogle_llama.jsonl"
# Recorded answers equal to the gold (up to case), one search and two.
CHOSEN = (0, 3, 7)
ENTRY = DOCS.removeprefix("Doc 1 ")
# A query whose quotes are gone (R1-Searcher cleans them) but whose backslash and accent each encoding writes its way.
ODD_QUERY = "Zürich back\\slash"
SYNTHETIC = (
    f"I look it up. {r1.BEGIN_QUERY} {ODD_QUERY}{r1.END_QUERY}\n\n{r1.DOCUMENTS_OPEN}\n(1)Citi x\n"
    f"{r1.DOCUMENTS_CLOSE}\n\nOsgood founded it. <answer> Samuel Osgood </answer>"
)


@pytest.fixture(scope="module")
def tokenizer():
    from searchrl.tiny_policy.model import build_tokenizer

    return build_tokenizer(["Citibank was founded in 1812 by Samuel Osgood."], protocol_tokens=False, qwen_split=True)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    lines = RECORDINGS.read_text(encoding="utf-8").splitlines()
    return [json.loads(lines[i]) for i in CHOSEN]


def replay(protocol, trajectory: str) -> tuple[list[str], str]:
    """The replayed segments as the replay engine cuts them, and the solution the agent builds from them (a tool
    turn after each search)."""
    segments = recorded_actions(protocol.from_r1_searcher(trajectory), protocol)
    solution = "".join(s + protocol.documents_block([ENTRY], after=s) for s in segments[:-1]) + segments[-1]
    return segments, solution


def first_call_as_rendered(tok, protocol, kwargs, thinking: bool, reasoning: str, query: str) -> str:
    """The template's own rendering of the first call and its tool turn, past the prompt (as the families test
    cuts it)."""
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": query}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    if thinking:
        turn["reasoning_content"] = turn["thinking"] = reasoning
    user = {"role": "user", "content": "Who founded Citibank?"}
    prompt = render(tok, [user], kwargs)
    rendered = render(tok, [user, turn, {"role": "tool", "content": DOCS}], kwargs)
    # Qwen3 with thinking off drops the empty think block its prompt closed when it renders the turn as history.
    prompt = prompt if rendered.startswith(prompt) else prompt.removesuffix("<think>\n\n</think>\n\n")
    assert rendered.startswith(prompt) and rendered.endswith(protocol.documents_block([ENTRY]))
    return rendered[len(prompt) :]


@pytest.mark.parametrize("name,kwargs,form,answer", CASES, ids=IDS)
def test_each_family_replays_recordings_in_its_own_form_and_is_paid(tokenizer, records, name, kwargs, form, answer):
    tok = with_template(tokenizer, name)
    protocol = bind_template(get_protocol("tool-call"), tok, kwargs)
    thinking = kwargs == ON or name == "gptoss"
    assert protocol.replay_problem is None and protocol.replay.reasons is thinking
    for record in records:
        turns = r1.recorded_turns(record["gen_text_store"])
        queries = [q for _, q, _ in turns if q]
        segments, solution = replay(protocol, record["gen_text_store"])
        assert len(segments) == len(queries) + 1
        assert [protocol.search_query(s) for s in segments] == [*queries, None]
        # The call is the template's own rendering of it, reasoning included where the policy reasons.
        first_reasoning = turns[0][0]
        rendered = first_call_as_rendered(tok, protocol, kwargs, thinking, first_reasoning, queries[0])
        assert segments[0] + protocol.documents_block([ENTRY], after=segments[0]) == rendered
        assert (first_reasoning in segments[0]) is thinking
        # The answer as the families test writes the family's answer after a tool turn.
        reasoning, _, recorded = turns[-1]
        assert segments[-1] == answer.replace(REASONING, reasoning).replace(ANSWER, f"<answer> {recorded} </answer>")
        scored = score_solution(
            solution, [record["answer"]], RewardSpec(protocol="tool-call"), {"num_searches": len(queries)}
        )
        violations = {k: v for k, v in scored.logs.items() if k.startswith("violation_") and v}
        assert not violations and scored.logs["em"] == 1.0 and scored.logs["format_ok"] == 1.0
        assert scored.reward == FULL


@pytest.mark.parametrize("name,kwargs,form,answer", CASES, ids=IDS)
def test_each_family_replays_an_accented_query_as_its_template_encodes_it(tokenizer, name, kwargs, form, answer):
    tok = with_template(tokenizer, name)
    protocol = bind_template(get_protocol("tool-call"), tok, kwargs)
    thinking = kwargs == ON or name == "gptoss"
    segments, solution = replay(protocol, SYNTHETIC)
    assert protocol.search_query(segments[0]) == ODD_QUERY
    rendered = first_call_as_rendered(tok, protocol, kwargs, thinking, "I look it up.", ODD_QUERY)
    assert segments[0] + protocol.documents_block([ENTRY], after=segments[0]) == rendered
    scored = score_solution(solution, ["Samuel Osgood"], RewardSpec(protocol="tool-call"), {"num_searches": 1})
    assert scored.reward == FULL


def test_the_unbound_protocol_replays_qwen3s_form_byte_for_byte(records):
    """What the rehearsal's Qwen3 stand-in and CI replay: unchanged, on one recording spelled out and on every
    recording of the file (the digest of what the protocol wrote before replays followed the bound family)."""
    default = get_protocol("tool-call")
    assert default.from_r1_searcher(records[0]["gen_text_store"]) == (
        "<think>\nGiven the information, I don't have specific knowledge about the last king from Britain's House of "
        'Hanover, so I will perform a search to find the required information. The query to search for is "\n'
        '</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "last king Britain House Hanover died"}}'
        "\n</tool_call><think>\nBased on the search results, I found that the last king from Britain's House of "
        "Hanover was William IV, and he died on 20 June 1837.\n</think>\n\n<answer> 20 June 1837 </answer>"
    )
    digest = hashlib.sha256()
    for line in RECORDINGS.read_text(encoding="utf-8").splitlines():
        digest.update(default.from_r1_searcher(json.loads(line)["gen_text_store"]).encode() + b"\0")
    assert digest.hexdigest() == "cfa5164f29aa6f2a7148bf21b05e7c54ab71255617c7721f4aa9b147ecab5d7d"
    # The JSON call escapes as json.dumps does (ASCII), as it always has.
    assert json.dumps(ODD_QUERY)[1:-1] in default.from_r1_searcher(SYNTHETIC)


def test_a_template_whose_turns_cannot_be_read_off_refuses_to_replay_and_deepseek_v3_is_refused(tokenizer):
    with pytest.raises(ValueError, match="cannot replay a recording in this template's form: no answer"):
        tc.ToolCallProtocol(replay_problem="no answer").from_r1_searcher(SYNTHETIC)
    tok = with_template(tokenizer, "deepseekv3")
    with pytest.raises(ValueError, match="nor does it render the `tools` list into the prompt"):
        bind_template(get_protocol("tool-call"), tok, {})
