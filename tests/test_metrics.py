import pytest

from searchrl.metrics import as_golds, best_over_golds, cover_exact_match, exact_match, f1, normalize_answer


@pytest.mark.parametrize(
    "raw,norm",
    [
        ("The  Eiffel_Tower!", "eiffel tower"),
        ("an apple, a pear", "apple pear"),
        ("\u2018Quoted\u2019 `x\u00b4", "quoted x"),
        ("True", "yes"),
        ("False", "no"),
        ("theatre", "theatre"),
    ],
)
def test_normalize(raw, norm):
    assert normalize_answer(raw) == norm


def test_em_f1_cem():
    assert exact_match("the James Madison", "James Madison") == 1.0
    assert exact_match("Madison", "James Madison") == 0.0
    assert f1("Madison", "James Madison") == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert cover_exact_match("President James Madison", "James Madison") == 1.0
    assert cover_exact_match("Madison", "James Madison") == 0.0


def test_yes_no_f1_is_zero_unless_equal():
    assert f1("yes", "yes it is") == 0.0
    assert f1("no", "no") == 1.0
    assert f1("True", "yes") == 1.0


def test_empty_prediction_cover_em_follows_r1searcher():
    # R1-Searcher splits on " ", so an empty gold is covered by anything and an empty prediction by nothing else.
    assert cover_exact_match("", "x") == 0.0
    assert f1("", "x") == 0.0


def test_max_over_golds_and_labels():
    assert best_over_golds("em", "NYC", ["New York", "NYC"]) == 1.0
    assert best_over_golds("em", "x", []) == 0.0
    assert as_golds('["a", "b"]') == ["a", "b"]
    assert as_golds("[not json") == ["[not json"]
    assert as_golds(["a"]) == ["a"]
    with pytest.raises(TypeError):
        as_golds(3)
