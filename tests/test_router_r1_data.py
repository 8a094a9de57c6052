"""Router-R1's data as its data_process scripts make it, loaded through `datasets` from a folder laid out like
the hub's RUC-NLPIR/FlashRAG_datasets (tests/fixtures/flashrag), and its verl parquet files read back."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from searchrl.jsonl import RecordError
from stage_router_r1 import original
from tests.conftest import ROOT

FLASHRAG = str(ROOT / "tests/fixtures/flashrag")


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_train_recipe_draws_as_qa_train_merge(monkeypatch):
    monkeypatch.setattr(original, "TRAIN", (("nq", 5), ("hotpotqa", 4)))
    rows = original.recipe("train", FLASHRAG)
    nq, hotpot = (
        jsonl(ROOT / "tests/fixtures/flashrag/nq/train.jsonl"),
        jsonl(ROOT / "tests/fixtures/flashrag/hotpotqa/train.jsonl"),
    )
    # random.seed(42) at module level, then random.sample(range(len(train)), 7000) per set, in order.
    rng = random.Random(42)
    expected = [nq[i] for i in rng.sample(range(len(nq)), 5)] + [hotpot[i] for i in rng.sample(range(len(hotpot)), 4)]
    assert [r["question"] for r in rows] == [
        e["question"].strip() + ("" if e["question"].strip().endswith("?") else "?") for e in expected
    ]
    assert [r["answer"] for r in rows] == [e["golden_answers"] for e in expected]
    assert [r["query_type"] for r in rows] == ["nq"] * 5 + ["hotpotqa"] * 4
    assert all(r["question"].endswith("?") and not r["question"].endswith("??") for r in rows)


def test_test_sets_take_test_else_dev_split_and_at_most_500():
    assert original.test_split(FLASHRAG, "nq") == "test"
    assert original.test_split(FLASHRAG, "hotpotqa") == "dev"  # no test split: qa_test_gen.py falls back to dev
    hotpot = original.recipe("test:hotpotqa", FLASHRAG)
    dev = jsonl(ROOT / "tests/fixtures/flashrag/hotpotqa/dev.jsonl")
    assert [r["question"] for r in hotpot] == [d["question"] for d in dev]  # fewer than 500: all, in order
    assert len(original.recipe("test:bamboogle", FLASHRAG)) == 4
    with pytest.raises(RecordError, match="expected train, validation or test:SET"):
        original.recipe("test:squad", FLASHRAG)


def verl_rows(questions):
    """Rows as qa_train_merge.py writes them (its make_map_fn), before `to_parquet`."""
    return [
        {
            "data_source": source,
            "prompt": [{"role": "user", "content": f"Answer the given question. ...\nQuestion: {q}\n"}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": golds}},
            "extra_info": {"split": "train", "index": i},
        }
        for i, (source, q, golds) in enumerate(questions)
    ]


def test_verl_parquet_is_read_back_with_datasets(tmp_path, chat_model):
    from datasets import Dataset

    path = tmp_path / "train_nh_qwen.parquet"
    Dataset.from_list(
        verl_rows(
            [("nq", "who invented the telephone?", ["Alexander Graham Bell"]), ("hotpotqa", "Who?", ["Ann", "Bea"])]
        )
    ).to_parquet(str(path))
    assert original.read_verl_parquet(path) == [
        {"question": "who invented the telephone?", "answer": ["Alexander Graham Bell"], "query_type": "nq"},
        {"question": "Who?", "answer": ["Ann", "Bea"], "query_type": "hotpotqa"},
    ]
    out = tmp_path / "prompts.jsonl"
    done = prepare("--input", str(path), "--out", str(out), "--model", str(chat_model), "--keep-leaked")
    assert done.returncode == 0, done.stderr
    assert sorted(r["question"] for r in jsonl(out)) == ["Who?", "who invented the telephone?"]
    assert {r["query_type"] for r in jsonl(out)} == {"nq", "hotpotqa"}


def prepare(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "stage_router_r1.prepare_data", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_prepare_writes_a_recipe_set_unchanged(tmp_path, chat_model):
    out = tmp_path / "test_nq.jsonl"
    done = prepare("--recipe", "test:nq", "--flashrag", FLASHRAG, "--out", str(out), "--model", str(chat_model))
    assert done.returncode == 0, done.stderr
    rows = jsonl(out)
    assert [r["question"] for r in rows] == [r["question"] for r in original.recipe("test:nq", FLASHRAG)]
    assert rows[0]["label"] == json.dumps(["Queensland, Australia", "Australia"])
    assert json.loads(out.with_suffix(".report.json").read_text())["recipe"] == "test:nq"
    mixed = prepare("--recipe", "train", "--mix", "stage1=3", "--out", str(out), "--model", str(chat_model))
    assert mixed.returncode == 2 and "--recipe draws Router-R1's own set" in mixed.stderr
