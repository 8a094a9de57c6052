"""What an evaluation takes: a checkpoint folder (save_pretrained) with its template, a stage config's
episode settings, the replay policy, benchmarks in other projects' formats; offline, errors that say
what to download. On CPU: a tiny Llama from a config, the mini index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.run_local import main as run_local
from searchrl.hub import HubError
from searchrl.jsonl import RecordError
from searchrl.qa_data.questions import load_questions, parse_hf
from tests.conftest import ROOT

QUESTION = "Who was the first president of the United States?"
RECORDED = (
    " I will look both up. <|begin_of_query|> Alan Turing || Enigma machine <|end_of_query|>\n\n"
    "<|begin_of_documents|>\n(1)old\n<|end_of_documents|>\n\n"
    "Enough. </think><answer> George Washington </answer>"
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from searchrl.tiny_policy.model import save_checkpoint

    texts = [line for line in (ROOT / "examples/bamboogle_llama_sample.jsonl").open()][:8]
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "final", texts)


def summary(out: Path, name: str = "bamboogle") -> dict:
    return json.loads((out / f"{name}.summary.json").read_text())


def test_checkpoint_folder_with_template_evaluates_on_cpu(checkpoint, mini_index, tmp_path, capsys):
    common = ["--dataset", "bamboogle", "--limit", "2", "--engine", "hf", "--index", str(mini_index)]
    common += ["--segment-tokens", "8", "--max-searches", "1", "--batch-size", "2"]
    assert run_local([*common, "--model", str(checkpoint), "--out", str(tmp_path / "a")]) == 2
    assert "--template base|chat" in capsys.readouterr().err
    code = run_local([*common, "--model", str(checkpoint), "--template", "base", "--out", str(tmp_path / "a")])
    assert code == 0, capsys.readouterr().err[-2000:]
    s = summary(tmp_path / "a")
    assert s["n"] == 2 and s["model_path"] == str(checkpoint.resolve()) and s["template"] == "base"
    lines = (tmp_path / "a/bamboogle.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert "Assistant: <think>" not in json.loads(lines[0])["gen_text_store"]
    # The model config it was trained from works as the template too.
    base = "configs/models/qwen2.5-7b-base.yaml"
    code = run_local([*common, "--model", str(checkpoint), "--template", base, "--out", str(tmp_path / "b")])
    assert code == 0 and summary(tmp_path / "b")["n"] == 2


def stage_file(tmp_path: Path, checkpoint: Path | None = None) -> Path:
    text = (ROOT / "configs/stages/stage2_answer.yaml").read_text()
    text = text.replace(
        "episode:\n  top_k: 3\n  max_searches: 8\n  max_segment_tokens: 512\n",
        "episode:\n  top_k: 2\n  max_searches: 4\n  max_segment_tokens: 64\n  max_queries_per_block: 2\n",
    )
    if checkpoint is not None:
        text = text.replace("ckpt.output_dir: runs/stage2_answer/final", f"ckpt.output_dir: {checkpoint}")
    path = tmp_path / "stage.yaml"
    path.write_text(text)
    return path


def test_stage_episode_settings_and_multi_query_replay(mini_index, tmp_path, capsys):
    recordings = tmp_path / "recorded.jsonl"
    recordings.write_text(
        json.dumps({"question": QUESTION, "answer": "George Washington", "gen_text_store": RECORDED})
    )
    code = run_local(
        ["--dataset", str(recordings), "--engine", "replay", "--recordings", str(recordings)]
        + ["--index", str(mini_index), "--stage", str(stage_file(tmp_path)), "--out", str(tmp_path / "out")]
    )
    assert code == 0, capsys.readouterr().err[-2000:]
    s = summary(tmp_path / "out", "recorded")
    assert s["settings"]["top_k"] == 2 and s["settings"]["max_searches"] == 4
    assert s["settings"]["max_queries_per_block"] == 2 and s["em"] == 1.0 and s["model"] == "replay-recorded"
    record = json.loads((tmp_path / "out/recorded.jsonl").read_text())
    # Multi-query mode as trained: one search step, two queries, each followed by its own documents.
    trajectory = record["gen_text_store"]
    assert record["num_searches"] == 1 and "(1)Query: Alan Turing\nDoc 1: " in trajectory
    assert "(2)Query: Enigma machine\nDoc 1: " in trajectory
    assert "(1)old" not in trajectory  # the documents are the live index's, not the recording's


def test_stage_without_model_evaluates_its_final_checkpoint(checkpoint, tmp_path, capsys):
    import argparse

    from eval.runner import add_generation_args, episode_from, model_from

    p = argparse.ArgumentParser()
    add_generation_args(p)
    a = p.parse_args(["--stage", str(stage_file(tmp_path, checkpoint)), "--engine", "hf", "--top-k", "7"])
    model, episode = model_from(a), episode_from(a)
    assert model.model_path == str(checkpoint.resolve()) and model.kind == "base"
    assert (episode.top_k, episode.max_searches, episode.max_queries_per_block) == (7, 4, 2)
    missing = p.parse_args(["--stage", str(stage_file(tmp_path, tmp_path / "nowhere")), "--engine", "hf"])
    with pytest.raises(ValueError, match="train the stage first"):
        model_from(missing)


def test_readme_cpu_path_replays_recorded_trajectories(mini_index, tmp_path, capsys):
    sample = "examples/bamboogle_llama_sample.jsonl"
    code = run_local(
        ["--dataset", sample, "--engine", "replay", "--recordings", sample, "--index", str(mini_index)]
        + ["--limit", "3", "--out", str(tmp_path)]
    )
    assert code == 0, capsys.readouterr().err[-2000:]
    from searchrl.protocols.r1_searcher import parse_solution

    recorded = [json.loads(line) for line in (ROOT / sample).open()][:3]
    done = [json.loads(line) for line in (tmp_path / "bamboogle_llama_sample.jsonl").open()]
    assert [r["searches"] for r in done] == [parse_solution(r["gen_text_store"]).queries for r in recorded]
    assert [r["pred_ans"] for r in done] == [r["pred_ans"] for r in recorded]


def test_flashrag_and_search_r1_formats(tmp_path):
    rows = [
        {"id": "test_0", "question": "who wrote hamlet?", "golden_answers": ["Shakespeare", "William Shakespeare"]},
        {"id": "test_1", "question": "capital of france?", "golden_answers": ["Paris"]},
    ]
    jsonl = tmp_path / "nq.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    listed = tmp_path / "nq_list.json"
    listed.write_text(json.dumps(rows))
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "nq.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    expected = [
        {"idx": "test_0", "question": "who wrote hamlet?", "answer": ["Shakespeare", "William Shakespeare"]},
        {"idx": "test_1", "question": "capital of france?", "answer": ["Paris"]},
    ]
    for path in (jsonl, listed, parquet):
        assert load_questions(str(path)) == expected
    nested = tmp_path / "trivia.jsonl"
    nested.write_text(json.dumps({"q": "x?", "answer": {"aliases": ["a", "b"], "value": "a"}}) + "\n")
    assert load_questions(str(nested), "q", "answer.aliases") == [{"idx": 0, "question": "x?", "answer": ["a", "b"]}]
    with pytest.raises(RecordError, match="--question-field"):
        load_questions(str(nested))


def test_hf_spec_with_config_and_split():
    assert parse_hf("hf:RUC-NLPIR/FlashRAG_datasets") == ("RUC-NLPIR/FlashRAG_datasets", None, None)
    assert parse_hf("hf:hotpot_qa:validation") == ("hotpot_qa", None, "validation")
    assert parse_hf("hf:hotpot_qa:distractor") == ("hotpot_qa", "distractor", None)
    assert parse_hf("hf:RUC-NLPIR/FlashRAG_datasets:nq:test") == ("RUC-NLPIR/FlashRAG_datasets", "nq", "test")


def test_offline_errors_name_what_to_download(mini_index, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="huggingface-cli download --repo-type dataset hotpot_qa"):
        load_questions("hf:hotpot_qa:distractor:validation")
    dead = "http://127.0.0.1:9"
    code = run_local(
        ["--dataset", "hf:hotpot_qa:distractor:validation", "--model", "configs/models/qwen2.5-7b-base.yaml"]
        + ["--engine", "openai", "--search-url", dead, "--out", str(tmp_path / "a")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "dataset 'hotpot_qa (config distractor)'" in err and "Traceback" not in err
    # A chat model needs its tokenizer; a hub model needs its weights.
    code = run_local(
        ["--dataset", "bamboogle", "--model", "configs/models/qwen2.5-7b-instruct.yaml", "--engine", "openai"]
        + ["--search-url", dead, "--out", str(tmp_path / "b")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "huggingface-cli download Qwen/Qwen2.5-7B-Instruct" in err
    code = run_local(
        ["--dataset", "bamboogle", "--model", "configs/models/qwen2.5-7b-base.yaml", "--engine", "hf"]
        + ["--index", str(mini_index), "--out", str(tmp_path / "c")]
    )
    assert code == 2 and "huggingface-cli download Qwen/Qwen2.5-7B" in capsys.readouterr().err
    from searchrl.qa_data.prompt_data import main as prepare

    src = tmp_path / "q.jsonl"
    src.write_text(json.dumps({"question": "q?", "answer": "a"}) + "\n")
    code = prepare(
        "stage2_answer",
        [
            "--input",
            str(src),
            "--out",
            str(tmp_path / "p.jsonl"),
            "--model",
            "configs/models/qwen2.5-7b-instruct.yaml",
        ],
    )
    assert code == 2 and "huggingface-cli download Qwen/Qwen2.5-7B-Instruct" in capsys.readouterr().err
    code = prepare("stage2_answer", ["--input", "some-org/not-here", "--out", str(tmp_path / "p.jsonl")])
    assert code == 2 and "--repo-type dataset some-org/not-here" in capsys.readouterr().err


@pytest.mark.parametrize(
    "module", ["eval.judge", "eval.run_local", "eval.run_bamboogle_online", "searchrl.tiny_policy.model"]
)
def test_help(module, capsys):
    import importlib

    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--help"])
    assert exit_.value.code == 0 and "usage:" in capsys.readouterr().out
