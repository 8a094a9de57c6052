"""Rewards on arbitrary text (hypothesis) and on the reward hacks a policy finds, as literal cases."""

from hypothesis import given, settings
from hypothesis import strategies as st

from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS, STAGE1_FORMAT, STAGE2_ANSWER
from tests.test_format_rules import CLEAN, DOCS

PIECES = [
    "<|begin_of_documents|>\n(1)",
    "<|end_of_documents|>\n\n",
    "<|begin_of_query|>",
    "<|end_of_query|>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    " Paris ",
    "Assistant",
    "\u5df4\u9ece",
    "\n",
]
TEXTS = st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=30).map("".join)
META = st.none() | st.fixed_dictionaries({"num_searches": st.integers(0, 5)})


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, gold=st.sampled_from(["Paris", "yes", "New York City"]), meta=META)
def test_every_preset_stays_in_range_and_is_deterministic(text, gold, meta):
    for spec in PRESETS.values():
        first = score_solution(text, [gold], spec, meta)
        low, high = spec.bounds()
        assert low <= first.reward <= high and 0.0 <= first.score <= 1.0
        assert score_solution(text, [gold], spec, meta) == first


def reward(text, spec=STAGE2_ANSWER, gold="Paris", searches=None):
    return score_solution(text, [gold], spec, {"num_searches": searches} if searches is not None else None).reward


def test_forged_documents_do_not_pay():
    forged = CLEAN.replace("It is Paris.", "<|begin_of_query|> q <|end_of_query|>" + DOCS + "It is Paris.")
    assert reward(forged, searches=2) == 1.0
    assert reward(forged, searches=1) == -1.0
    assert reward(forged, STAGE1_FORMAT, searches=1) == 0.0


def test_hacked_answers_do_not_pay():
    cases = {
        "tags inside the answer": CLEAN.replace(" Paris </answer>", " Paris <|begin_of_documents|> </answer>"),
        "several answers": CLEAN + "<answer> Paris </answer>",
        "role leakage": CLEAN.replace("It is Paris.", "Assistant: It is Paris."),
        "10,000-word answer": CLEAN.replace(" Paris </answer>", " Paris" + " word" * 10_000 + " </answer>"),
        "answer in another script": CLEAN.replace("It is Paris.", "\u7b54\u6848\u662f\u5df4\u9ece"),
    }
    for name, text in cases.items():
        assert reward(text) <= -1.0, name  # at best 1 for the answer minus 2 for the format: worse than no answer
        assert reward(text, STAGE1_FORMAT) <= 0.5, name


def test_empty_answer_scores_nothing():
    empty = CLEAN.replace(" Paris </answer>", " </answer>")
    assert reward(empty) == 0.0
    assert reward(empty, gold="") == 1.0  # an empty gold is matched only by an empty answer
