"""Each violation rule on literal strings: one case that fires it, and the clean case that does not."""

import pytest

from searchrl.protocols.r1_searcher import parse_solution
from searchrl.reward.format_rules import FormatContext, find_violations

DOCS = "\n\n<|begin_of_documents|>\n(1)Paris is the capital of France.\n<|end_of_documents|>\n\n"
CLEAN = (
    "Look it up. <|begin_of_query|> capital of France <|end_of_query|>"
    + DOCS
    + "It is Paris. </think><answer> Paris </answer>"
)


def violated(text: str, **ctx) -> set[str]:
    return {name for name, hit in find_violations(parse_solution(text), FormatContext(**ctx)).items() if hit}


def test_clean_solution_has_no_violation():
    assert violated(CLEAN) == set()
    assert violated(CLEAN, num_searches=1) == set()


@pytest.mark.parametrize(
    "text,rule",
    [
        # query opened but never closed
        (CLEAN.replace("<|end_of_query|>", ""), "tag_counts"),
        # documents typed without the exact newline forms
        (CLEAN.replace("<|begin_of_documents|>\n(1)", "<|begin_of_documents|>(1)"), "tag_counts"),
        (CLEAN.replace("<|end_of_documents|>\n\n", "<|end_of_documents|> "), "tag_counts"),
        # a documents block without a query
        (CLEAN.replace("<|begin_of_query|> capital of France <|end_of_query|>", ""), "tag_counts"),
        (CLEAN.replace("</think>", ""), "think"),
        (CLEAN.replace("</think>", "</think></think>"), "think"),
        ("<think>" + CLEAN, "think"),
        (CLEAN.replace("<answer> Paris </answer>", "Paris"), "answer_count"),
        (CLEAN + "<answer> Lyon </answer>", "answer_count"),
        (CLEAN.replace(" Paris </answer>", " Paris <|begin_of_query|> x </answer>"), "tags_in_answer"),
        (
            CLEAN.replace(" Paris </answer>", " one two three four five six seven eight nine ten eleven </answer>"),
            "answer_too_long",
        ),
        (CLEAN.replace("It is Paris.", "Assistant: it is Paris."), "role_leakage"),
        (CLEAN.replace("It is Paris.", "the assistant says Paris."), "role_leakage"),
        (CLEAN.replace("It is Paris.", "\u5df4\u9ece\u3002"), "cjk"),
    ],
)
def test_each_rule_fires(text, rule):
    assert rule in violated(text)


def test_ten_word_answer_is_allowed():
    text = CLEAN.replace(" Paris </answer>", " one two three four five six seven eight nine ten </answer>")
    assert "answer_too_long" not in violated(text)
    assert "answer_too_long" in violated(text, max_answer_words=9)


def test_cjk_inside_documents_is_fine_and_check_can_be_off():
    in_docs = CLEAN.replace("Paris is the capital", "\u5df4\u9ece is the capital")
    assert "cjk" not in violated(in_docs)
    outside = CLEAN.replace("It is Paris.", "\u5df4\u9ece")
    assert "cjk" not in violated(outside, check_cjk=False)


def test_forged_documents_need_metadata():
    two_blocks = CLEAN.replace("It is Paris.", "<|begin_of_query|> again <|end_of_query|>" + DOCS + "Paris.")
    assert violated(two_blocks) == set()
    assert violated(two_blocks, num_searches=2) == set()
    assert violated(two_blocks, num_searches=1) == {"forged_documents"}
