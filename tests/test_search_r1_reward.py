"""Search-R1's rewards as presets: on every recorded prompt + response, what Search-R1's own functions returned
(tests/fixtures/search_r1/reward_cases.json), in process and through the reward server as OpenRLHF calls it."""

from __future__ import annotations

import json

import httpx
import pytest

from reward_server.app import ServerSettings, create_app
from searchrl.config import ConfigError
from searchrl.paths import ROOT
from searchrl.protocols.search_r1 import action, final_answer, format_problem, render_documents
from searchrl.reward import search_r1
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS, RewardSpec, load_reward_spec
from searchrl.search.base import Passage
from searchrl.stage.config import load_stage
from tests.conftest import FIXTURES, serve

RECORDED = json.loads((FIXTURES / "search_r1" / "reward_cases.json").read_text(encoding="utf-8"))
# The v0.3 scripts' values (reward_model.*), as the recording's first parameter set.
V03 = {"structure_format_score": 0.2, "final_format_score": 0.1, "retrieval_score": 0.0}


def cases() -> list[dict]:
    out = []
    for row in RECORDED["cases"]:
        case = dict(zip(RECORDED["columns"], row, strict=True))
        case["id"] = "/".join(row[:3])
        case["prompt_text"] = RECORDED["prompts"][case["prompt"]]
        case["sequence"] = case["prompt_text"] + RECORDED["responses"][case["response"]]
        case["gold_list"] = RECORDED["golds"][case["golds"]]
        out.append(case)
    return out


CASES = cases()


def test_the_recording_covers_the_shapes_that_matter():
    assert RECORDED["params"][0] == V03 and len(CASES) >= 300
    shapes = {c["response"] for c in CASES}
    for shape in ("clean_right", "clean_wrong", "empty", "several_answers_last_right", "text_between_tags",
                  "unbalanced_think", "eos_im_end", "answer_in_information", "beijing_copied"):  # fmt: skip
        assert shape in shapes
    assert {c["prompt"] for c in CASES} == {"chat", "base", "chat_no_example"}
    # Every branch of both functions is paid somewhere in the recording.
    assert {c["em"] for c in CASES} == {0, 1} and {c["em_format"] for c in CASES} == {0, 0.1, 0.2, 0.8, 1.0}
    assert 0.2 + 0.1 in {c["em_format_retrieval"] for c in CASES}


def test_every_recorded_case_scores_as_search_r1_scored_it():
    wrong = []
    for c in CASES:
        got = (
            search_r1.em(c["sequence"], c["gold_list"]),
            search_r1.em_format(c["sequence"], c["gold_list"], **V03),
            search_r1.em_format(c["sequence"], c["gold_list"], **RECORDED["params"][1]),
        )
        if got != (c["em"], c["em_format"], c["em_format_retrieval"]):
            wrong.append((c["id"], got))
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("preset, column", [("search-r1-em", "em"), ("search-r1-em-format", "em_format")])
def test_the_presets_through_the_reward_server_return_search_r1s_numbers(preset, column):
    """OpenRLHF's remote-reward call: `query` the whole decoded sequence, `prompts` the prompt inside it."""
    spec = load_reward_spec(preset=preset)
    assert spec == PRESETS[preset] and spec.search_r1
    with serve(create_app(ServerSettings(spec=spec, preset=preset))) as url, httpx.Client(base_url=url) as http:
        for start in range(0, len(CASES), 128):
            batch = CASES[start : start + 128]
            body = {
                "query": [c["sequence"] for c in batch],
                "prompts": [c["prompt_text"] for c in batch],
                "labels": [c["gold_list"] for c in batch],
            }
            answer = http.post("/get_reward", json=body, timeout=60).raise_for_status().json()
            assert answer["rewards"] == [c[column] for c in batch]
            assert answer["scores"] == [c["em"] for c in batch]  # what dynamic filtering averages: the EM
            assert set(answer["extra_logs"]) == {"em", "has_answer", "format_ok", "retrieval_gold"}
        health = http.get("/health").json()
        assert health["preset"] == preset and health["spec"]["formula"] == spec.formula
        assert health["weights"]["answer"] == 1.0 and health["weights"]["format"] == spec.format_score


def test_the_whole_sequence_is_scored_not_the_response():
    """Search-R1 reads its instruction's tags too: with them, a response that answers nothing is read as answering
    the instruction's example (`Beijing`); without an example in the prompt, a single answer reads as none."""
    chat = RECORDED["prompts"]["chat"]
    empty = score_solution(chat, ["Beijing"], PRESETS["search-r1-em"])
    assert final_answer(chat) == "Beijing" and empty.reward == 1.0
    assert score_solution(chat, ["Paris"], PRESETS["search-r1-em-format"]).reward == 0.1
    bare = RECORDED["prompts"]["chat_no_example"] + "<think>x</think>\n<answer> Paris </answer>"
    assert final_answer(bare) is None and score_solution(bare, ["Paris"], PRESETS["search-r1-em"]).reward == 0.0


def test_format_problems_name_what_broke():
    chat = RECORDED["prompts"]["chat"]
    assert format_problem(chat + "<think>x</think>\n<answer> P </answer>") is None
    assert (
        format_problem(RECORDED["prompts"]["base"] + "<think>x</think><answer>P</answer>")
        == "Missing assistant marker"
    )
    assert format_problem(chat + "<think>x</think> so <answer>P</answer>").startswith("Unexpected content 'so'")
    assert format_problem(chat + "<think>x</think><answer>P</answer><|im_end|>") == "Unexpected content in state end"
    assert format_problem(chat + "<think>x").startswith("Mismatch in think tags: 1 opening vs 0 closing")
    assert format_problem(chat + "<answer>P</answer>") == "Unexpected tag <answer> in state start"
    assert format_problem(chat + "<think>x</think>") == "Incomplete sequence, ended in state after_think"


def test_the_protocol_renders_and_reads_as_search_r1s_loop():
    # Titles as the index keeps them (wiki-18's quotes taken off at import), quoted again as Search-R1 renders them:
    # tests/test_search_r1_oracle.py holds its own code's outputs.
    block = render_documents(
        [Passage("1", "Paris", "Paris is the capital.", 0.9), Passage("2", "Lyon", "A city.", 0.5)]
    )
    assert block == (
        '\n\n<information>Doc 1(Title: "Paris") Paris is the capital.\nDoc 2(Title: "Lyon") A city.</information>\n\n'
    )
    assert action("<think>a</think>\n<search> capital of France </search>") == ("search", "capital of France")
    assert action("<answer> Paris </answer><search>q</search>") == ("answer", "Paris")
    assert action("no tags") == (None, "")


def test_search_r1_keys_belong_to_its_formulas():
    with pytest.raises(ValueError, match="structure_format_score: Search-R1's reward scores only"):
        RewardSpec(structure_format_score=0.2)
    with pytest.raises(ValueError, match="violation_penalty: not used by formula search_r1_em_format"):
        RewardSpec(formula="search_r1_em_format", violation_penalty=1.0)
    with pytest.raises(ValueError, match="structure_format_score: not used by formula search_r1_em"):
        RewardSpec(formula="search_r1_em", structure_format_score=0.2)
    with pytest.raises(ConfigError, match="reward.retrieval_score"):
        load_reward_spec(preset="search-r1-em-format", overrides=["retrieval_score=x"])
    assert PRESETS["search-r1-em-format"].bounds() == (0.0, 1.0)


def test_a_stage_refuses_a_reward_in_another_protocol():
    """One tag protocol a run: a stage in R1-Searcher's protocol cannot be paid by Search-R1's reward, which reads
    Search-R1's tags (tests/test_search_r1_protocol.py: the other way round)."""
    with pytest.raises(ConfigError, match=r"reads search-r1's tags: set `protocol=search-r1`, or a formula that reads "
                       r"r1-searcher's \(searchrl, router_r1\)"):  # fmt: skip
        load_stage(ROOT / "configs/stages/stage2_answer.yaml", ["reward.formula=search_r1_em"])


# The Search-R1 gaming rows of docs/REWARDS.md: (prompt, response, golds) of the recording, what each row shows.
QUIRK_ROWS = (
    (("chat", "clean_right", "paris"), "clean: think, search, think, right answer"),
    (("chat", "no_search_right", "paris"), "no search, right answer"),
    (("chat", "clean_wrong", "paris"), "clean, wrong answer (a document holds the gold)"),
    (("chat", "empty_answer", "paris"), "clean, empty answer `<answer></answer>`"),
    (("chat", "answer_only_right", "paris"), "right answer alone, no `<think>`"),
    (("chat", "text_between_tags", "paris"), "right answer, text between the tags"),
    (("chat", "eos_im_end", "paris"), "right answer, then the decoded EOS token (Qwen's im_end)"),
    (("chat", "several_answers_last_right", "paris"), "two answers, the last right"),
    (("chat", "answer_in_information", "paris"), "the answer typed inside `<information>`, no answer after"),
    (("chat", "empty", "paris"), "empty response (the instruction's `Beijing` is read)"),
    (("chat", "empty", "beijing"), "empty response, when the gold is Beijing"),
    (("base", "clean_right", "paris"), "clean right answer, base prompt (no assistant marker)"),
    (("chat_no_example", "clean_right", "paris"), "clean right answer, a prompt without an answer example"),
)


def quirk_table() -> str:
    values = {tuple(row[:3]): row[3:] for row in RECORDED["cases"]}
    lines = ["| trajectory (chat prompt unless named) | `search-r1-em` | `search-r1-em-format` |", "|---|---|---|"]
    for key, what in QUIRK_ROWS:
        em, em_format, _ = values[key]
        lines.append(f"| {what} | {em:g} | {em_format:g} |")
    return "\n".join(lines) + "\n"


def test_rewards_md_prices_each_search_r1_quirk():
    """docs/REWARDS.md shows what each preset pays for each shape, as recorded from Search-R1's own functions; no
    shape pays more than a clean right answer."""
    from tests.gaming import PAGE

    page = PAGE.read_text(encoding="utf-8")
    block = page.split("<!-- table:search-r1 -->\n", 1)[1].split("<!-- /table -->", 1)[0]
    assert block == quirk_table(), "docs/REWARDS.md's Search-R1 table differs from the recording:\n" + quirk_table()
    values = [row[3:] for row in RECORDED["cases"]]
    clean = {tuple(row[:3]): row[3:] for row in RECORDED["cases"]}[("chat", "clean_right", "paris")]
    assert all(v[0] <= clean[0] and v[1] <= clean[1] for v in values)
