"""Reward values on literal strings, and R1-Searcher's reward reproduced on its released trajectories."""

import json

import pytest

from searchrl.metrics import as_golds
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS, STAGE1_FORMAT, STAGE2_ANSWER, RewardSpec
from tests.test_format_rules import CLEAN

NO_SEARCH = "I know it. </think><answer> Paris </answer>"


def reward(text, spec, gold="Paris", **meta):
    return score_solution(text, [gold], spec, meta or None)


def test_stage1_format_only():
    assert reward(CLEAN, STAGE1_FORMAT).reward == 1.0
    assert reward(CLEAN, STAGE1_FORMAT, gold="Lyon").reward == 1.0  # the answer's content is ignored
    assert reward(NO_SEARCH, STAGE1_FORMAT).reward == 0.5  # no search: format half only
    assert reward(CLEAN.replace("</think>", ""), STAGE1_FORMAT).reward == 0.5  # searched, format broken
    assert reward("rambling", STAGE1_FORMAT).reward == 0.0


def test_stage2_answer_and_penalty():
    assert reward(CLEAN, STAGE2_ANSWER).reward == 1.0
    assert reward(CLEAN, STAGE2_ANSWER, gold="Lyon").reward == 0.0
    assert reward(CLEAN.replace("</think>", ""), STAGE2_ANSWER).reward == -1.0
    assert reward("no answer at all </think>", STAGE2_ANSWER).reward == -2.0  # 0 for no answer, -2 for format
    f1_spec = STAGE2_ANSWER.model_copy(update={"answer_metric": "f1"})
    assert reward(CLEAN.replace(" Paris </answer>", " Paris France </answer>"), f1_spec).reward == pytest.approx(2 / 3)


def test_forged_documents_cost_the_penalty():
    two = CLEAN.replace(
        "It is Paris.",
        "<|begin_of_query|> again <|end_of_query|>" + "\n\n<|begin_of_documents|>\n(1)x\n<|end_of_documents|>\n\n",
    )
    assert reward(two, STAGE2_ANSWER, num_searches=2).reward == 1.0
    assert reward(two, STAGE2_ANSWER, num_searches=1).reward == -1.0
    assert reward(two, STAGE1_FORMAT, num_searches=1).reward == 0.0


def test_llama_stage1_preset():
    spec = PRESETS["r1searcher-llama-stage1"]
    assert reward(CLEAN, spec).reward == 2.0  # +1 right, +0.5 search, +0.5 format
    assert reward(CLEAN, spec, gold="Lyon").reward == 0.0
    assert reward(NO_SEARCH, spec).reward == 1.5
    assert reward("nothing", spec).reward == -1.0


@pytest.mark.parametrize("spec", [*PRESETS.values(), RewardSpec(answer_weight=-1.0, search_weight=-0.5)])
def test_scores_within_unit_interval_and_logs_complete(spec):
    for text in (CLEAN, NO_SEARCH, "x", CLEAN.replace("</think>", "")):
        for gold in ("Paris", "Lyon"):
            s = reward(text, spec, gold=gold)
            lo, hi = spec.bounds()
            assert lo <= s.reward <= hi
            assert 0.0 <= s.score <= 1.0
            # Search-R1's presets log what its reward reads; the agent's environment adds num_searches to every run.
            keys = ("format_ok", "em", "has_answer", "retrieval_gold") if spec.search_r1 else ("format_ok", "em", "f1")
            keys += () if spec.search_r1 else ("num_searches",)
            if spec.formula == "searchrl":
                keys += ("cem", "answer_words", "violation_role_leakage")
            for key in keys:
                assert key in s.logs


@pytest.mark.parametrize(
    "name,n,violations,mean",
    [("bamboogle_llama", 125, 5, 0.490619), ("hotpotqa_llama", 500, 18, 0.633850)],
)
def test_r1searcher_qwen_stage2_reproduced(fixtures, name, n, violations, mean):
    rows = [json.loads(line) for line in (fixtures / "r1searcher" / f"{name}.jsonl").open()]
    scores = [
        score_solution(r["gen_text_store"], as_golds(r["answer"]), PRESETS["r1searcher-qwen-stage2"]) for r in rows
    ]
    assert len(scores) == n
    assert sum(s.logs["format_ok"] == 0.0 for s in scores) == violations
    assert round(sum(s.reward for s in scores) / n, 6) == mean


def test_role_leakage_reads_the_policys_text_not_the_passages(fixtures):
    # R1-Searcher's released trajectories: 20 of 625 are penalised only because a retrieved passage says
    # "assistant" (an assistant coach, a research assistant); one sample's own text leaks the role.
    rows = [
        json.loads(line)
        for name in ("hotpotqa_llama", "bamboogle_llama")
        for line in (fixtures / "r1searcher" / f"{name}.jsonl").open()
    ]

    def leaks(spec):
        scored = (score_solution(r["gen_text_store"], as_golds(r["answer"]), spec) for r in rows)
        return sum(s.logs["violation_role_leakage"] for s in scored)

    assert leaks(STAGE2_ANSWER) == 1
    assert leaks(STAGE1_FORMAT) == 1
    assert leaks(PRESETS["r1searcher-qwen-stage2"]) == 21  # exact to R1-Searcher, which scans the documents too
