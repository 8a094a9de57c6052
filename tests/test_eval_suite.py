"""`searchrl eval local --suite search-r1`: the seven sets of Search-R1's table from FlashRAG-format files (the
fixture folder laid out as the hub's RUC-NLPIR/FlashRAG_datasets), through the evaluation's own episode loop with
recorded answers, reported in Search-R1's layout with its EM; sampling, resume and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import suites
from eval.run_local import main as run_local
from searchrl.qa_data.questions import dataset_name, load_questions
from tests.conftest import ROOT

FLASHRAG = ROOT / "tests/fixtures/flashrag"
SETS = suites.SUITES["search-r1"]
# Recorded answers: a question's first gold, except these (set, row) -> answer. The hyphen one is right under
# R1-Searcher's EM (punctuation becomes a space) and wrong under Search-R1's (punctuation is deleted).
WRONG = {("nq", 1): "Buzz Aldrin", ("musique", 0): "nothing"}
HYPHEN = ("triviaqa", 1)


def rows(s: suites.SuiteSet) -> list[dict]:
    return [json.loads(line) for line in (FLASHRAG / s.config / f"{s.split}.jsonl").open()]


def answer(s: suites.SuiteSet, i: int, row: dict) -> str:
    if (s.name, i) == HYPHEN:
        return row["golden_answers"][0].replace(" ", "-")
    return WRONG.get((s.name, i), row["golden_answers"][0])


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "recorded.jsonl"
    with path.open("w") as fh:
        for s in SETS:
            for i, row in enumerate(rows(s)):
                # Keyed by the question as Search-R1's script writes it: a replay finds it only if the run does too.
                q = suites.search_r1_question(row["question"])
                fh.write(
                    json.dumps(
                        {"question": q, "gen_text_store": f" I know. </think><answer> {answer(s, i, row)} </answer>"}
                    )
                    + "\n"
                )
    return path


def run(recordings: Path, index: Path, out: Path, *extra: str) -> int:
    args = ["--suite", "search-r1", "--suite-dir", str(FLASHRAG), "--engine", "replay", "--recordings"]
    return run_local([*args, str(recordings), "--index", str(index), "--out", str(out), *extra])


def test_search_r1_suite_table_and_em(recordings, mini_index, tmp_path, capsys):
    assert run(recordings, mini_index, tmp_path) == 0, capsys.readouterr().err[-2000:]
    expected = {}
    for s in SETS:
        summary = json.loads((tmp_path / f"{s.name}.summary.json").read_text())
        n = len(rows(s))
        wrong = sum(1 for k in (*WRONG, HYPHEN) if k[0] == s.name)
        expected[s.name] = (n - wrong) / n
        assert summary["suite"] == "search-r1" and summary["n"] == summary["population"] == n
        assert summary["suite_em"] == pytest.approx(expected[s.name]), s.name
    # R1-Searcher's EM (the usual columns) counts the hyphenated answer; Search-R1's does not.
    trivia = json.loads((tmp_path / "triviaqa.summary.json").read_text())
    assert trivia["em"] == 1.0 and trivia["suite_em"] == 0.75
    nq = [json.loads(line) for line in (tmp_path / "nq.jsonl").open()]
    assert all(r["question"].endswith("?") for r in nq)  # NQ's questions have no mark; Search-R1 adds one
    table = (tmp_path / "search-r1.md").read_text()
    head, _, row = table.splitlines()[:3]
    assert head == "| model | NQ | TriviaQA | PopQA | HotpotQA | 2wiki | Musique | Bamboogle | Avg. |"
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert cells == [f"{expected[s.name]:.3f}" for s in SETS] + [f"{sum(expected.values()) / len(SETS):.3f}"]
    assert "The full splits" in table
    results = (tmp_path / "results.md").read_text()
    assert "| nq | 4 |" in results and "## In search-r1's table" in results and head in results


def test_sample_is_seeded_stated_and_resumes_only_as_itself(recordings, mini_index, tmp_path, capsys):
    assert run(recordings, mini_index, tmp_path / "a", "--sample", "2", "--seed", "3") == 0
    assert run(recordings, mini_index, tmp_path / "b", "--sample", "2", "--seed", "3") == 0
    picked = {}
    for s in SETS:
        a = [json.loads(line)["idx"] for line in (tmp_path / "a" / f"{s.name}.jsonl").open()]
        b = [json.loads(line)["idx"] for line in (tmp_path / "b" / f"{s.name}.jsonl").open()]
        assert len(a) == 2 and a == b
        picked[s.name] = a
        summary = json.loads((tmp_path / "a" / f"{s.name}.summary.json").read_text())
        assert (summary["n"], summary["population"], summary["settings"]["sample_seed"]) == (2, 4, 3)
    assert len({tuple(v) for v in picked.values()}) > 1  # each set draws on its own
    assert "A sample, not the full splits (seed 3): nq 2 of 4" in (tmp_path / "a/search-r1.md").read_text()
    capsys.readouterr()
    assert run(recordings, mini_index, tmp_path / "a", "--sample", "3", "--seed", "3") == 2
    assert "--force-new" in capsys.readouterr().err


def test_sampling_keeps_order_and_each_set_its_own_draw():
    qs = [{"idx": i} for i in range(100)]
    first = suites.sample(qs, 10, 0, "nq")
    assert first == suites.sample(qs, 10, 0, "nq") and [q["idx"] for q in first] == sorted(q["idx"] for q in first)
    assert first != suites.sample(qs, 10, 0, "popqa") and first != suites.sample(qs, 10, 1, "nq")
    assert suites.sample(qs[:5], 10, 0, "nq") == qs[:5]


def test_hub_layout_is_read_by_the_hub_loader(monkeypatch):
    # The default reads the hub's dataset by name; the fixture folder stands in for it under the same layout.
    assert suites.suite_specs("search-r1", None)[0] == "nq=hf:RUC-NLPIR/FlashRAG_datasets:nq:test"
    monkeypatch.setattr(suites, "FLASHRAG_REPO", str(FLASHRAG))
    specs = suites.suite_specs("search-r1", None)
    assert [dataset_name(s) for s in specs] == [s.name for s in SETS]
    for spec, s in zip(specs, SETS, strict=True):
        got = load_questions(spec)
        assert [q["question"] for q in got] == [r["question"] for r in rows(s)]
        assert [q["answer"] for q in got] == [r["golden_answers"] for r in rows(s)]


def test_bad_input_names_the_fix(recordings, mini_index, tmp_path, capsys):
    partial = tmp_path / "flashrag"
    (partial / "nq").mkdir(parents=True)
    (partial / "nq/test.jsonl").write_text((FLASHRAG / "nq/test.jsonl").read_text())
    code = run_local(["--suite", "search-r1", "--suite-dir", str(partial), "--engine", "replay", "--recordings",
                      str(recordings), "--index", str(mini_index), "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "no triviaqa/test.jsonl (TriviaQA)" in err and "huggingface-cli download" in err
    assert run(recordings, mini_index, tmp_path / "o", "--sample", "2", "--limit", "3") == 2
    assert "not together with --limit" in capsys.readouterr().err
    code = run_local(["--dataset", "bamboogle", "--suite-dir", str(FLASHRAG), "--engine", "replay", "--recordings",
                      str(recordings), "--index", str(mini_index), "--out", str(tmp_path / "p")])  # fmt: skip
    assert code == 2 and "only with --suite" in capsys.readouterr().err
