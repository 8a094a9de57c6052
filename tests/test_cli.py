"""The command-line tools: figures on R1-Searcher's released trajectories, errors, --help."""

import json
import subprocess
import sys

import httpx
import pytest

from searchrl.process import free_port, start_module, stop

GEN = "tests/fixtures/r1searcher"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120)


# R1-Searcher's metric_calc_rule.py prints these (percent, one decimal) for the released files.
R1_FIGURES = {"hotpotqa_llama": (58.4, 64.8, 70.6, 74.6), "bamboogle_llama": (44.0, 50.4, 57.1, 54.4)}


@pytest.mark.parametrize("name", sorted(R1_FIGURES))
@pytest.mark.parametrize("pred", [["--pred-key", "pred_ans"], []])
def test_eval_score_reproduces_r1searcher(name, pred):
    out = run("eval.score", f"{GEN}/{name}.jsonl", *pred, "--judge-key", "gpt4o_output", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert [round(100 * got[k], 1) for k in ("em", "cem", "f1", "acc_l")] == list(R1_FIGURES[name])


def test_eval_score_table_and_errors(tmp_path):
    out = run("eval.score", f"{GEN}/bamboogle_llama.jsonl", "--pred-key", "pred_ans")
    assert "| 125 | 44.0 | 50.4 | 57.1 |" in out.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": "x", "pred_ans": "x"}\n{oops\n')
    out = run("eval.score", str(bad), "--pred-key", "pred_ans")
    assert out.returncode == 2 and "bad.jsonl:2: not valid JSON" in out.stderr
    out = run("eval.score", f"{GEN}/bamboogle_llama.jsonl", "--pred-key", "prediction")
    assert out.returncode == 2 and "no key 'prediction'" in out.stderr


@pytest.mark.parametrize(
    "name,n,violations,mean", [("bamboogle_llama", 125, 5, 0.490619), ("hotpotqa_llama", 500, 18, 0.633850)]
)
def test_offline_scorer_reproduces_r1searcher_reward(name, n, violations, mean, tmp_path):
    out = run(
        "reward_server.offline",
        f"{GEN}/{name}.jsonl",
        "--preset",
        "r1searcher-qwen-stage2",
        "--solution-key",
        "gen_text_store",
        "--answer-key",
        "answer",
        "--json",
        "--out",
        str(tmp_path / "s.jsonl"),
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert (got["n"], got["format_violations"], round(got["mean_reward"], 6)) == (n, violations, mean)
    assert sum(1 for _ in (tmp_path / "s.jsonl").open()) == n


def test_offline_scorer_config_error():
    out = run(
        "reward_server.offline",
        f"{GEN}/bamboogle_llama.jsonl",
        "--config",
        "configs/stages/stage2_answer.yaml",
        "reward.answer_metric=bleu",
    )
    assert out.returncode == 2 and "reward.answer_metric" in out.stderr


@pytest.mark.parametrize("module", ["eval.score", "reward_server", "reward_server.offline"])
def test_help(module):
    out = run(module, "--help")
    assert out.returncode == 0 and "usage:" in out.stdout


def test_server_module_serves_a_stage_config(tmp_path):
    port = free_port()
    proc = start_module("reward_server", ["--config", "configs/stages/stage1_format.yaml"], port, tmp_path / "log")
    try:
        body = {"query": ["q </think><answer> a </answer>"], "labels": ["b"]}
        assert httpx.post(f"http://127.0.0.1:{port}/get_reward", json=body).json()["rewards"] == [0.5]
    finally:
        stop(proc)
