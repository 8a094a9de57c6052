import json

import pytest

from searchrl.search.index.build import main as build_main
from searchrl.search.index.corpus import CorpusReport, TooManyBadLines, read_corpus, read_text
from tests.test_search_fixtures import KILT_SAMPLE


def kilt_line(title: str, paragraphs: list[str]) -> str:
    return json.dumps({"wikipedia_title": title, "text": paragraphs})


def test_kilt_markers_dropped_text_kept_title_repeated():
    page = kilt_line(
        "Ada Lovelace",
        ["Ada Lovelace\n", "Ada was a mathematician.\n", "Section::::Early life.\n", "BULLET::::- Born in London.\n"],
    )
    records = list(read_text(page, "kilt"))
    assert len(records) == 1
    assert records[0].title == "Ada Lovelace"
    assert records[0].text == "Ada was a mathematician. Early life. - Born in London."
    assert "::::" not in records[0].text


def test_kilt_cut_into_100_word_passages_with_title_and_sequential_ids():
    words = [f"w{i}" for i in range(250)]
    text = "\n".join(
        [kilt_line("T1", ["T1", " ".join(words[:120]), " ".join(words[120:])]), kilt_line("T2", ["T2", "short page"])]
    )
    records = list(read_text(text, "kilt"))
    assert [len(r.text.split()) for r in records] == [100, 100, 50, 2]
    assert [r.title for r in records] == ["T1", "T1", "T1", "T2"]
    assert [r.id for r in records] == ["0", "1", "2", "3"]
    assert records[1].text.split()[0] == "w100"


def test_kilt_sample_file():
    report = CorpusReport()
    records = list(read_corpus(KILT_SAMPLE, "kilt", report))
    titles = {json.loads(line)["wikipedia_title"] for line in KILT_SAMPLE.read_text(encoding="utf-8").splitlines()}
    assert report.bad == 0 and report.lines == len(titles)
    assert {r.title for r in records} == titles
    assert all(0 < len(r.text.split()) <= 100 for r in records)
    assert not any("Section::::" in r.text or "BULLET::::" in r.text for r in records)


def test_tsv_header_title_column_and_bad_lines():
    text = "id\ttext\ttitle\n1\tfirst text\tFirst\n2\tsecond text\nbroken line\n3\t\tNo text\n"
    report = CorpusReport()
    records = list(read_text(text, "tsv", report))
    assert [(r.id, r.title, r.text) for r in records] == [("1", "First", "first text"), ("2", "", "second text")]
    assert report.bad == 2
    assert [n for n, _ in report.examples] == [4, 5]


def test_tsv_without_header_keeps_first_line():
    records = list(read_text("7\tsome text\n", "tsv"))
    assert records[0].id == "7"


def test_jsonl_malformed_lines_counted_with_line_numbers():
    text = '{"id": "a", "title": "A", "text": "x"}\nnot json\n{"id": "b"}\n{"id": 3, "text": "y"}\n'
    report = CorpusReport()
    records = list(read_text(text, "jsonl", report))
    assert [r.id for r in records] == ["a", "3"]
    assert report.lines == 4 and report.bad == 2
    assert [n for n, _ in report.examples] == [2, 3]
    assert "line 2" in report.summary() and "line 3" in report.summary()


def test_bad_line_thresholds():
    report = CorpusReport(lines=100, bad=3)
    report.check(max_bad_lines=3)
    report.check(max_bad_lines=None, max_bad_fraction=0.05)
    with pytest.raises(TooManyBadLines, match="max-bad-lines 2"):
        report.check(max_bad_lines=2)
    with pytest.raises(TooManyBadLines, match="max-bad-fraction"):
        report.check(max_bad_lines=None, max_bad_fraction=0.01)


def test_build_fails_on_bad_lines_before_encoding(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "1", "text": "ok"}\n{bad\n', encoding="utf-8")
    out = tmp_path / "idx"
    assert build_main(["--corpus", str(corpus), "--format", "jsonl", "--out", str(out)]) == 2
    assert "line 2" in capsys.readouterr().err
    assert not (out / "store").exists() and not (out / "manifest.json").exists()


def test_unknown_format_rejected():
    with pytest.raises(ValueError, match="unknown corpus format"):
        list(read_text("x", "csv"))  # type: ignore[arg-type]
