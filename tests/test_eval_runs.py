"""End-to-end evaluation runs on CPU: a tiny transformer from a config, the bundled mini index."""

import asyncio
import json
import subprocess
import sys

import pytest

from eval.generation import Completion, GenParams, run_episodes
from eval.score import score_file
from searchrl.rollout.environment import SearchEnvironment
from searchrl.search.base import Passage
from searchrl.stage.config import EpisodeConfig
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def tiny_model_config(tmp_path_factory):
    from searchrl.tiny_policy.model import build_model, build_tokenizer

    d = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer([line for line in (ROOT / "examples/bamboogle_llama_sample.jsonl").open()])
    build_model(len(tok)).save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    cfg = d / "tiny.yaml"
    template = (ROOT / "configs/models/qwen2.5-7b-base.yaml").read_text().split("template: |-", 1)[1]
    cfg.write_text(f"name: tiny\nkind: base\nmodel_path: {d / 'model'}\ntemplate: |-{template}")
    return cfg


def run_local(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eval.run_local", *args], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


def test_run_local_end_to_end_and_resume(tiny_model_config, mini_index, tmp_path):
    common = [
        "--dataset",
        "bamboogle,2wiki",
        "--model",
        str(tiny_model_config),
        "--engine",
        "hf",
        "--index",
        str(mini_index),
        "--segment-tokens",
        "12",
        "--max-searches",
        "2",
        "--out",
        str(tmp_path),
    ]
    first = run_local(*common, "--limit", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    lines = (tmp_path / "bamboogle.jsonl").read_text().splitlines()
    assert len(lines) == 2
    # A crash mid-write leaves a cut line: the next run drops it, keeps the rest, and does what is missing.
    with (tmp_path / "bamboogle.jsonl").open("a") as fh:
        fh.write('{"idx": 99, "quest')
    second = run_local(*common, "--limit", "3")
    assert second.returncode == 0, second.stderr[-2000:]
    after = (tmp_path / "bamboogle.jsonl").read_text().splitlines()
    assert after[:2] == lines and len(after) == 3
    for name in ("bamboogle", "2wiki"):
        summary = json.loads((tmp_path / f"{name}.summary.json").read_text())
        again = score_file(str(tmp_path / f"{name}.jsonl"), pred_key="pred_ans")
        assert summary["n"] == 3 and {k: summary[k] for k in ("em", "cem", "f1")} == {
            k: again[k] for k in ("em", "cem", "f1")
        }
        record = json.loads((tmp_path / f"{name}.jsonl").read_text().splitlines()[0])
        assert {"question", "answer", "gen_text_store", "pred_ans", "searches", "metrics"} <= set(record)
    table = (tmp_path / "results.md").read_text()
    assert "| bamboogle | 3 |" in table and "| 2wiki | 3 |" in table
    assert (tmp_path / "results.png").read_bytes()[:4] == b"\x89PNG"


def test_run_local_bad_dataset(tiny_model_config, tmp_path):
    out = run_local("--dataset", "nope", "--model", str(tiny_model_config), "--engine", "hf", "--out", str(tmp_path))
    assert out.returncode == 2 and "--dataset 'nope'" in out.stderr


class ScriptedEngine:
    """Answers each prompt from a script keyed by how many searches it has seen (no model needed)."""

    def __init__(self, script):
        self.script = script
        self.batches = []

    async def generate_batch(self, prompts, params):
        self.batches.append(len(prompts))
        return [Completion(self.script[p.count("<|begin_of_documents|>\n(1)")], "stop") for p in prompts]


class CountingBackend:
    def __init__(self):
        self.calls = []

    async def search(self, queries, top_k):
        self.calls.append(list(queries))
        return [[Passage(str(i), "T", f"text for {q}", 1.0) for i in range(top_k)] for q in queries]

    async def aclose(self):
        pass


def test_turns_batch_generation_and_searches():
    script = [
        "<|begin_of_query|> a <|end_of_query|>",
        "<|begin_of_query|> b <|end_of_query|>",
        "so </think><answer> x </answer>",
    ]
    backend = CountingBackend()
    env = SearchEnvironment(backend, EpisodeConfig(top_k=2, max_searches=16))
    engine = ScriptedEngine(script)
    prompts = [f"P{i}: " for i in range(5)]
    results = asyncio.run(run_episodes(engine, env, prompts, ["x"] * 5, GenParams()))
    assert engine.batches == [5, 5, 5]
    assert backend.calls == [["a"] * 5, ["b"] * 5]  # searches of concurrent episodes go together
    assert all(r.episode.num_searches == 2 and r.episode.solution.endswith("</answer>") for r in results)


def completions_app(calls: list):
    """An OpenAI-compatible /v1/completions that behaves like a search-tuned model: first a query
    (stopping on <|end_of_query|>, reported vLLM-style in `stop_reason`), then an answer."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/completions")
    async def complete(body: dict):
        calls.append(body)
        solution = body["prompt"].rsplit("Assistant: <think>", 1)[1]
        if "<|begin_of_documents|>\n(1)" not in solution:
            return {
                "choices": [
                    {
                        "text": "I will search. <|begin_of_query|> Alan Turing",
                        "finish_reason": "stop",
                        "stop_reason": "<|end_of_query|>",
                    }
                ]
            }
        return {
            "choices": [
                {
                    "text": " Found it. </think><answer> Alan Turing </answer>",
                    "finish_reason": "stop",
                    "stop_reason": None,
                }
            ]
        }

    return app


def test_online_bamboogle_with_provider_judge_and_replay(tmp_path, monkeypatch):
    from tests.conftest import serve
    from tests.fakes_web import FakeControl, chat_app, serper_app

    provider, judge, llm_calls = FakeControl(), FakeControl(api_key=None), []
    with (
        serve(serper_app(provider)) as provider_url,
        serve(chat_app(judge, answer="True")) as judge_url,
        serve(completions_app(llm_calls)) as llm_url,
    ):
        env = {"SERPER_API_KEY": "test-key"}
        args = [
            "-m",
            "eval.run_bamboogle_online",
            "--provider",
            "serper",
            "--provider-url",
            provider_url,
            "--model",
            "configs/models/qwen2.5-7b-base.yaml",
            "--engine",
            "openai",
            "--base-url",
            f"{llm_url}/v1",
            "--limit",
            "4",
            "--cache",
            str(tmp_path / "cache.sqlite"),
            "--judge-url",
            f"{judge_url}/v1",
            "--judge-model",
            "fake-judge",
            "--judge-cache",
            str(tmp_path / "judge.sqlite"),
            "--rate-limit",
            "100",
        ]
        first = subprocess.run(
            [sys.executable, *args, "--out", str(tmp_path / "live")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env={**__import__("os").environ, **env},
        )
        assert first.returncode == 0, first.stderr[-3000:]
        provider_calls = provider.calls
        assert provider_calls >= 1 and judge.calls == 4
        assert "site:en.wikipedia.org" in provider.requests[0].json["q"]
        # Replay: the same run from the cache, without any provider call and without the API key.
        again = subprocess.run(
            [sys.executable, *args, "--replay", "--out", str(tmp_path / "replay")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert provider.calls == provider_calls
        assert f"web search: {provider_calls} provider requests" in first.stderr
        assert "web search: 0 provider requests" in again.stderr and "$0.0000" in again.stderr
        # A budget of no requests on an empty cache: the run stops naming the limit, the provider never called.
        capped = subprocess.run(
            [sys.executable, *[str(tmp_path / "empty.sqlite") if a.endswith("cache.sqlite") else a for a in args]]
            + ["--max-queries", "0", "--out", str(tmp_path / "capped")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            env={**__import__("os").environ, **env},
        )
        assert capped.returncode != 0 and "search.web.max_queries=0 reached" in capped.stderr, capped.stderr[-3000:]
        assert provider.calls == provider_calls
    live = [json.loads(line) for line in (tmp_path / "live/bamboogle.jsonl").open()]
    replay = [json.loads(line) for line in (tmp_path / "replay/bamboogle.jsonl").open()]
    assert [r["gen_text_store"] for r in live] == [r["gen_text_store"] for r in replay]
    assert all(r["searches"] == ["Alan Turing"] and "<|begin_of_documents|>\n(1)" in r["gen_text_store"] for r in live)
    summary = json.loads((tmp_path / "live/bamboogle.summary.json").read_text())
    assert summary["acc_l"] == 1.0 and summary["judge_model"] == "fake-judge"
    assert summary["search"]["provider"] == "serper"
    again = score_file(str(tmp_path / "live/bamboogle.jsonl"), pred_key="pred_ans", judge_key="judge")
    assert {k: summary[k] for k in ("n", "em", "cem", "f1", "acc_l")} == {
        k: again[k] for k in ("n", "em", "cem", "f1", "acc_l")
    }
    assert (tmp_path / "live/results.png").exists() and "ACC_L judged by fake-judge" in (
        tmp_path / "live/results.md"
    ).read_text()
