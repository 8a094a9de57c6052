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


# Search-R1-format trajectories, one shape a row: (what the policy writes, the answer Search-R1's EM reads).
SEARCH_R1_SHAPES = ("clean", "wrong", "no answer", "over the turn limit")


def search_r1_trajectory(shape: str, question: str, gold: str) -> str:
    search = f"<think>I should look this up.</think>\n<search> {question} </search>"
    # A recorded trajectory keeps the documents it was shown; the replay leaves them out and the run appends its own.
    shown = "\n\n<information>Doc 1(Title: Old) stale text</information>\n\n"
    if shape == "clean":
        return f"{search}{shown}<think>Found it.</think>\n<answer> {gold} </answer>"
    if shape == "wrong":
        return f"{search}{shown}<think>Found it.</think>\n<answer> Buzz Aldrin </answer>"
    if shape == "no answer":
        return "<think>I cannot tell.</think>"
    return shown.join([search] * 6)


def test_search_r1_checkpoint_evaluated_in_its_own_protocol(mini_index, tmp_path, capsys):
    """`--protocol search-r1`: its instruction, `<search>` stops, top-3 `Doc i(Title: t)` blocks in `<information>`,
    4 turns then a last one without search, and the answer its EM reads from the whole sequence, as its code does."""
    from eval.score import score_file
    from searchrl.protocols import search_r1
    from searchrl.reward.search_r1 import em

    recorded, shapes = tmp_path / "search_r1.jsonl", {}
    with recorded.open("w") as fh:
        for s in SETS:
            for i, row in enumerate(rows(s)):
                q, shape = suites.search_r1_question(row["question"]), SEARCH_R1_SHAPES[i % len(SEARCH_R1_SHAPES)]
                shapes[q] = shape
                traj = search_r1_trajectory(shape, q, row["golden_answers"][0])
                fh.write(json.dumps({"question": q, "gen_text_store": traj}) + "\n")
    out = tmp_path / "out"
    args = ["--suite", "search-r1", "--suite-dir", str(FLASHRAG), "--engine", "replay", "--recordings", str(recorded)]
    assert run_local([*args, "--protocol", "search-r1", "--index", str(mini_index), "--out", str(out)]) == 0, (
        capsys.readouterr().err[-2000:]
    )
    seen, ems = set(), []
    for s in SETS:
        summary = json.loads((out / f"{s.name}.summary.json").read_text())
        assert summary["protocol"] == "search-r1"
        assert (summary["settings"]["top_k"], summary["settings"]["max_turns"]) == (3, 4)
        records = [json.loads(line) for line in (out / f"{s.name}.jsonl").open()]
        for r in records:
            shape = shapes[r["question"]]
            seen.add(shape)
            assert r["prompt"] == search_r1.PROMPT.replace("{question}", r["question"])
            golds = r["answer"] if isinstance(r["answer"], list) else [r["answer"]]
            # Scored as Search-R1's qa_em scores the decoded prompt and response.
            assert suites.squad_exact_match(r["pred_ans"], golds) == em(r["prompt"] + r["gen_text_store"], golds)
            blocks = search_r1.information_blocks(r["gen_text_store"])
            assert "stale text" not in r["gen_text_store"]
            if shape in ("clean", "wrong"):
                assert r["num_searches"] == 1 and r["has_answer"] and len(blocks) == 1
                assert [line[:4] for line in blocks[0].splitlines()] == ["Doc ", "Doc ", "Doc "]  # top-3
                assert r["pred_ans"] == (golds[0] if shape == "clean" else "Buzz Aldrin")
            elif shape == "no answer":
                # Told its action is invalid, four times, then the episode ends: the message's own
                # "<answer> and </answer>" is the last answer in the sequence, and the one scored.
                assert r["turns"] == 4 and r["gen_text_store"].count("My previous action is invalid") == 4
                assert (r["pred_ans"], r["has_answer"]) == ("and", False)
            else:
                # Four searches run; the fifth turn's is not, and with no answer the instruction's example is read.
                assert (r["num_searches"], len(blocks), r["turns"]) == (4, 4, 4)
                assert (r["pred_ans"], r["has_answer"]) == ("Beijing", False)
        ems.append(summary["suite_em"])
        assert summary["suite_em"] == pytest.approx(
            sum(shapes[r["question"]] == "clean" for r in records) / len(records)
        )
        # eval.score reads the same answers again from the record (its prompt included).
        rescored = score_file(str(out / f"{s.name}.jsonl"))
        assert rescored["no_answer"] == sum(not r["has_answer"] for r in records)
        assert rescored["em"] == pytest.approx(summary["em"])
    assert seen == set(SEARCH_R1_SHAPES)
    assert f"{sum(ems) / len(ems):.3f}" in (out / "search-r1.md").read_text()
    # A run speaks one protocol: another protocol's stage is refused, and so is resuming under another protocol.
    stage = ["--stage", str(ROOT / "configs/stages/stage2_answer.yaml")]
    assert run_local([*args, "--protocol", "search-r1", *stage, "--index", str(mini_index), "--out", str(out)]) == 2
    assert "speaks r1-searcher" in capsys.readouterr().err
    assert run_local([*args, "--index", str(mini_index), "--out", str(out)]) == 2
    assert "--force-new" in capsys.readouterr().err


def test_rag_r1_checkpoint_evaluated_in_its_own_protocol(mini_index, tmp_path, capsys):
    """RAG-R1's stage: its prompt, several queries in one `<search>`, answered in one `<information>` JSON block. Its
    protocol without the stage (whose prompt it is) is refused, and so is a routing stage, sent to `eval routing`."""
    s = next(s for s in SETS if s.name == "bamboogle")
    recorded = tmp_path / "rag.jsonl"
    with recorded.open("w") as fh:
        for row in rows(s):
            q = row["question"]
            first = q.replace(",", " ")
            traj = (f"<think>Two lookups.</think>\n<search> {first}, {row['golden_answers'][0]} </search>"
                    f"<think>Found it.</think>\n<answer> {row['golden_answers'][0]} </answer>")  # fmt: skip
            fh.write(json.dumps({"question": q, "gen_text_store": traj}) + "\n")
    data = FLASHRAG / s.config / f"{s.split}.jsonl"
    args = ["--dataset", f"bamboogle={data}", "--engine", "replay", "--recordings", str(recorded)]
    out = tmp_path / "out"
    stage = ["--stage", str(ROOT / "configs/stages/rag_r1.yaml")]
    assert run_local([*args, *stage, "--index", str(mini_index), "--out", str(out)]) == 0, capsys.readouterr().err[
        -2000:
    ]
    summary = json.loads((out / "bamboogle.summary.json").read_text())
    assert summary["protocol"] == "rag-r1" and summary["settings"]["max_queries_per_block"] == 3
    for r in (json.loads(line) for line in (out / "bamboogle.jsonl").open()):
        assert r["prompt"].startswith("Answer the question below. Think inside <think> and </think> first")
        assert r["num_searches"] == 1 and r["pred_ans"] == r["answer"][0]
        block = r["gen_text_store"].split("\n<information>\n", 1)[1].split("\n</information>\n", 1)[0]
        assert len(json.loads(block)["query"]) == 2
    assert run_local([*args, "--protocol", "rag-r1", "--index", str(mini_index), "--out", str(tmp_path / "p")]) == 2
    assert "give --stage (e.g. configs/stages/rag_r1.yaml)" in capsys.readouterr().err
    router = ["--stage", str(ROOT / "configs/stages/router_r1.yaml")]
    assert run_local([*args, *router, "--index", str(mini_index), "--out", str(tmp_path / "r")]) == 2
    assert "searchrl eval routing" in capsys.readouterr().err
