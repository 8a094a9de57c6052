import pytest

from searchrl.metrics import (
    LabelError,
    as_golds,
    best_over_golds,
    cover_exact_match,
    exact_match,
    f1,
    normalize_answer,
)


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
    assert as_golds('["x", "y"]') == ["x", "y"]
    assert as_golds("[not json") == ["[not json"]
    assert as_golds(["x"]) == ["x"]
    with pytest.raises(TypeError):
        as_golds(3)


@pytest.mark.parametrize("label", ["", "A", "An", "The", "!", " . ", ["Paris", "the"], "[]", []])
def test_golds_that_normalise_to_nothing_are_refused(label):
    # An empty answer normalises to "" too, so it would score EM 1 against any of these.
    assert exact_match("", "A") == 1.0
    with pytest.raises(LabelError, match="normalises to nothing|no gold answer"):
        as_golds(label)


@pytest.mark.parametrize(
    "label,why",
    [
        ('["a", 1]', "of type int; every gold answer must be a string"),
        ('["Paris", ["Lyon"]]', "of type list"),
        ("['Paris', 'Lyon']", "looks like a list but is not JSON"),
        ('[{"x": 1}]', "of type dict"),
    ],
)
def test_list_shaped_labels_are_parsed_strictly_or_refused(label, why):
    with pytest.raises(LabelError, match=why):
        as_golds(label)
