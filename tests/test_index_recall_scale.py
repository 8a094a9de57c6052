"""benchmarks/index_recall.py's scale mode: the filler corpus and the question split, without encoding anything."""

from __future__ import annotations

import pytest

from benchmarks import index_recall as ir

N = 100_000


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return ir.scale_corpus(N)


def test_the_corpus_has_the_asked_size_and_every_real_passage(corpus):
    real = ir.real_passages()
    assert len(corpus) == N
    assert len({r["id"] for r in corpus}) == N
    assert corpus[: len(real)] == real
    titles = {r["title"] for r in real}
    fillers = corpus[len(real) :]
    assert all(r["id"].startswith("filler/") and r["title"] in titles and r["text"] for r in fillers)
    assert len({(r["title"], r["text"]) for r in fillers}) == len(fillers)


def test_the_corpus_is_the_same_for_the_same_seed(corpus):
    assert ir.scale_corpus(5_000) == corpus[:5_000]
    assert ir.scale_corpus(5_000, seed=ir.SCALE_SEED + 1) != corpus[:5_000]


def test_the_corpus_keeps_every_real_passage_or_refuses():
    real = ir.real_passages()
    assert ir.scale_corpus(len(real)) == real
    with pytest.raises(ValueError):
        ir.scale_corpus(len(real) - 1)


def test_the_default_run_still_reads_the_first_passages_as_before():
    rows = ir.passages(800)
    assert len(rows) == 800
    assert [(r["title"], r["text"]) for r in rows] == [(r["title"], r["text"]) for r in ir.real_passages()[:800]]


def test_no_held_out_question_tunes():
    tuning, held = ir.question_split()
    same = {" ".join(q.lower().split()) for q in tuning}
    assert tuning and held
    assert not any(" ".join(q.lower().split()) in same for q in held)
    every = [r["question"] for source in ir.QUESTIONS for r in ir.source_rows(source)]
    assert set(tuning) | set(held) <= set(every)
    assert len(tuning) == sum(-(-len(ir.source_rows(s)) // ir.TUNE_EVERY) for s in ir.QUESTIONS)
