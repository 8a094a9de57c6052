from searchrl.protocols.r1_searcher import (
    END_QUERY,
    clean_query,
    extract_answer,
    format_documents,
    last_query,
    parse_solution,
    split_solution,
)

GOOD = (
    'I need to look this up. <|begin_of_query|> "Citibank" founded   year<|end_of_query|>'
    "\n\n<|begin_of_documents|>\n(1)Citibank was founded in 1812.\n(2)Other.\n<|end_of_documents|>\n\n"
    "So 1812; the president was James Madison. </think>\n<answer> James Madison </answer>"
)


def test_parse_good_solution():
    p = parse_solution(GOOD)
    assert p.queries == ["Citibank founded year"]
    assert p.num_searches == 1 and p.num_document_blocks == 1
    assert p.documents == ["\n(1)Citibank was founded in 1812.\n(2)Other.\n"]
    assert set(p.tag_counts.values()) == {1}
    assert (p.think_opens, p.think_closes, p.answer_opens, p.answer_closes) == (0, 1, 1, 1)
    assert p.answer == "James Madison"
    assert "Citibank was founded" not in p.outside_documents


def test_answer_needs_both_tags():
    assert extract_answer("<answer> x") is None
    assert extract_answer("x </answer>") is None
    assert extract_answer("<answer>a</answer> <answer> b </answer>") == "b"


def test_documents_block_is_exact_form():
    block = format_documents(["A text", "B text"])
    assert block == "\n\n<|begin_of_documents|>\n(1)A text\n(2)B text\n<|end_of_documents|>\n\n"
    p = parse_solution("<|begin_of_query|> q <|end_of_query|>" + block)
    assert set(p.tag_counts.values()) == {1}


def test_last_query():
    assert last_query('think <|begin_of_query|> a  "b" <|end_of_query|>') == "a b"
    assert last_query("no query here") is None
    assert last_query("<|begin_of_query|>   " + END_QUERY) is None
    assert clean_query(" \u201cx\u201d  y ") == "x y"


def test_split_solution_exact_and_fuzzy():
    prompt = "User:Q?\nAssistant: <think>"
    assert split_solution(prompt + " body", prompt) == " body"
    assert split_solution("<s>" + prompt + " body", prompt) == " body"
    assert split_solution("User: Q?\n Assistant:  <think> body", prompt) == " body"


def test_split_solution_rejects_missing_prompt():
    import pytest

    with pytest.raises(ValueError):
        split_solution("something else", "User:Q?")


PIECES = [
    "<|begin_of_documents|>",
    "\n",
    "(1)",
    "<|end_of_documents|>",
    "<|begin_of_query|>",
    "<|end_of_query|>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "x y",
    "\n\n",
    "<|begin_of",
    "_documents|>",
    "Assistant",
]


def test_single_scan_counts_equal_str_count():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from searchrl.protocols.r1_searcher import TAG_FORMS

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.sampled_from(PIECES) | st.text(max_size=5), max_size=40))
    def check(parts):
        text = "".join(parts)
        p = parse_solution(text)
        assert p.tag_counts == {name: text.count(form) for name, form in TAG_FORMS.items()}
        assert (p.think_opens, p.think_closes, p.answer_opens, p.answer_closes) == tuple(
            text.count(t) for t in ("<think>", "</think>", "<answer>", "</answer>")
        )

    check()
