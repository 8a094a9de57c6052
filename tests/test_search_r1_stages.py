"""The project's two stages in Search-R1's protocol (`protocol=search-r1 reward.protocol=search-r1`): the same
format rules read from Search-R1's tags, stage 1 paying a search and a well-formed episode, stage 2 the answer less
a penalty for a broken format. Each row is a scripted policy run through OpenRLHF's own agent loop against a real
retrieval server and a real reward server holding the stage's spec: nothing a policy can learn scores above the
clean right answer, in either stage."""

from __future__ import annotations

import pytest

from searchrl.protocols import search_r1
from tests.conftest import ROOT
from tests.test_search_r1_protocol import ANSWER, RAMBLE, SEARCH, UNCUT, episode_runner, stage_servers
from tests.test_search_r1_protocol import model as model  # noqa: F401 (fixtures)
from tests.test_search_r1_protocol import tokenizer as tokenizer  # noqa: F401

IN_SEARCH_R1 = (
    "protocol=search-r1", "reward.protocol=search-r1", "episode.max_turns=2", "episode.max_searches=2", UNCUT,
)  # fmt: skip
STAGES = {
    "stage1": ROOT / "configs/stages/stage1_format.yaml",
    "stage2": ROOT / "configs/stages/stage2_answer.yaml",
}
WRONG = "<think>The documents name him.</think>\n<answer> John Smith </answer>"
OUTSIDE = "The documents name him.\n<answer> Nidal Hasan </answer>"
TAGGED = "<think>x</think>\n<answer> <search> Nidal Hasan </answer>"
LISTED = "<think>x</think>\n<answer> Nidal Hasan, John Smith </answer>"

# name: (segments, right answer?, stage-1 reward, stage-2 reward)
ROWS = {
    "clean: one search, right answer": ([SEARCH, ANSWER], True, 1.0, 1.0),
    "clean: one search, wrong answer": ([SEARCH, WRONG], False, 1.0, 0.0),
    "no search, right answer": ([ANSWER], True, 0.5, 1.0),
    "two searches, right answer": ([SEARCH, SEARCH, ANSWER], True, 1.0, 1.0),
    "a third search over the turn limit": ([SEARCH, SEARCH, SEARCH], False, 0.0, -2.0),
    "an invalid turn, then the answer": ([RAMBLE, ANSWER], True, 0.0, -1.0),
    "an invalid turn, a search, the answer": ([RAMBLE, SEARCH, ANSWER], True, 0.5, -1.0),
    "information typed by the policy": (
        ["<think>I recall:</think>\n<information>Nidal Hasan did it.</information>\n" + ANSWER], True, 0.0, -1.0
    ),
    "the reading outside <think>": ([SEARCH, OUTSIDE], True, 0.5, -1.0),
    "the answer inside an open <think>": ([SEARCH, "<think>It is <answer> Nidal Hasan </answer>"], True, 0.5, -1.0),
    "a tag inside the answer": ([SEARCH, TAGGED], False, 0.0, -2.0),
    "a list of candidates": ([SEARCH, LISTED], False, 1.0, 0.0),
}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(STAGES))
def stage_run(request, tokenizer, model):  # noqa: F811
    path = STAGES[request.param]
    with stage_servers(path, *IN_SEARCH_R1) as urls:
        run = episode_runner(urls, tokenizer, model, path=path)
        yield request.param, {name: run(segments, *IN_SEARCH_R1) for name, (segments, *_) in ROWS.items()}


def test_each_row_is_paid_what_the_rules_say_and_none_beats_the_clean_answers(stage_run):
    stage, results = stage_run
    column = 2 if stage == "stage1" else 3
    got = {name: results[name][1]["reward"] for name in ROWS}
    assert got == pytest.approx({name: row[column] for name, row in ROWS.items()}), got
    right, wrong = got["clean: one search, right answer"], got["clean: one search, wrong answer"]
    for name, (_, correct, *_) in ROWS.items():
        assert got[name] <= (right if correct else min(right, wrong)), name


def test_the_episode_speaks_search_r1s_tags_and_the_format_rule_reads_its_walk(stage_run):
    stage, results = stage_run
    prompt, _, text, logs = results["clean: one search, right answer"]
    assert prompt.startswith(search_r1.PROMPT.split("{question}")[0]) and "<information>Doc 1(Title: " in text
    assert logs["num_searches"] == 1.0 and logs["format_ok"] == 1.0
    _, _, _, logs = results["an invalid turn, then the answer"]
    assert logs["invalid_actions"] == 1.0 and logs["violation_think"] == 1.0  # the message breaks the v0.3 walk
    if stage == "stage1":
        assert logs["search_ok"] == 0.0


def rows_table() -> str:
    lines = ["| trajectory (Search-R1's tags) | right answer | stage 1 | stage 2 |", "|---|---|---|---|"]
    for name, (_, correct, s1, s2) in ROWS.items():
        lines.append(
            f"| {name.replace('<', '`<').replace('>', '>`')} | {'yes' if correct else 'no'} | {s1:g} | {s2:g} |"
        )
    return "\n".join(lines) + "\n"


def test_rewards_md_shows_what_each_row_pays():
    page = (ROOT / "docs/REWARDS.md").read_text(encoding="utf-8")
    block = page.split("<!-- table:search-r1-stages -->\n", 1)[1].split("<!-- /table -->", 1)[0]
    assert block == rows_table(), "docs/REWARDS.md: paste tests.test_search_r1_stages.rows_table()"
