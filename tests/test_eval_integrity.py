"""Evaluation never reports a wrong number: failed searches, endpoint stop-string behaviours, replay misses,
resumes under other settings, judge outages. Real loopback servers (an OpenAI-compatible completions
endpoint scripted like a search-tuned model, the retrieval server over the mini index, a judge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI

from eval.run_local import main as run_local
from eval.segments import segment_text
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as search_app
from searchrl.process import free_port
from searchrl.protocols.r1_searcher import BEGIN_QUERY, END_QUERY
from tests.conftest import serve
from tests.fakes_web import FakeControl, chat_app

SEGMENTS = [
    "I will search. <|begin_of_query|> Alan Turing",
    " Not enough yet. <|begin_of_query|> Turing machine inventor",
    " Found it. </think><answer> Alan Turing </answer>",
]


def completions_app(behaviour: dict, calls: list) -> FastAPI:
    """/v1/completions scripted by how many documents blocks the prompt holds; `behaviour` says whether the
    stop string comes back in the text (`keep`) and in which field the stop is reported (`field`)."""
    app = FastAPI()

    @app.post("/v1/completions")
    async def complete(body: dict) -> dict:
        calls.append(body)
        segment = min(body["prompt"].count("<|begin_of_documents|>\n(1)"), len(SEGMENTS) - 1)
        if behaviour.get("hook"):
            behaviour["hook"](segment)
        text = SEGMENTS[segment]
        searching = text.rstrip().endswith(("Alan Turing", "inventor"))
        choice = {"text": text + (END_QUERY if searching and behaviour["keep"] else ""), "finish_reason": "stop"}
        if behaviour["field"]:
            choice[behaviour["field"]] = END_QUERY if searching else None
        return {"choices": [choice]}

    return app


@pytest.fixture(scope="module")
def llm():
    behaviour, calls = {"keep": True, "field": "stop_reason"}, []
    with serve(completions_app(behaviour, calls)) as url:
        yield url, behaviour, calls


@pytest.fixture(scope="module")
def retrieval(mini_index):
    with serve(search_app(ServerConfig(index_dir=mini_index))) as url:
        yield url


def args(llm_url: str, search_url: str, out: Path, *extra: str) -> list[str]:
    return [
        "--dataset",
        "bamboogle",
        "--limit",
        "2",
        "--model",
        "configs/models/qwen2.5-7b-base.yaml",
        "--engine",
        "openai",
        "--base-url",
        f"{llm_url}/v1",
        "--search-url",
        search_url,
        "--search-deadline-s",
        "3",
        "--out",
        str(out),
        *extra,
    ]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    "choice, expected",
    [
        # vllm serve: stop string kept, stop_reason names it.
        ({"text": "a <|begin_of_query|> q<|end_of_query|>", "finish_reason": "stop", "stop_reason": END_QUERY}, 1),
        # vllm serve without include_stop_str_in_output: dropped, named.
        ({"text": "a <|begin_of_query|> q", "finish_reason": "stop", "stop_reason": END_QUERY}, 1),
        # OpenAI-style: dropped, no stop field at all.
        ({"text": "a <|begin_of_query|> q", "finish_reason": "stop"}, 1),
        # kept, no stop field.
        ({"text": "a <|begin_of_query|> q<|end_of_query|>", "finish_reason": "stop"}, 1),
        # SGLang names it in matched_stop.
        ({"text": "a <|begin_of_query|> q", "finish_reason": "stop", "matched_stop": END_QUERY}, 1),
        # a server that ignores `stop` runs on past the tag: cut there.
        ({"text": "a <|begin_of_query|> q<|end_of_query|> more <|end_of_query|>", "finish_reason": "stop"}, 1),
        # EOS inside an open query, reported as such (stop_reason None): no search is made up.
        ({"text": "a <|begin_of_query|> q", "finish_reason": "stop", "stop_reason": None}, 0),
        ({"text": "a <|begin_of_query|> q", "finish_reason": "length"}, 0),
        ({"text": "</think><answer> x </answer>", "finish_reason": "stop", "stop_reason": None}, 0),
    ],
)
def test_segment_text_gives_one_end_tag_whatever_the_endpoint(choice, expected):
    text, _ = segment_text(choice)
    assert text.count(END_QUERY) == expected
    assert text.endswith(END_QUERY) == bool(expected)


@pytest.mark.parametrize(
    "choice, expected",
    [
        # stop_after_answer: `</search>` or `</answer>`, whichever came; dropped ones are put back by the open tag.
        ({"text": "<think>x</think><search> q</search>", "finish_reason": "stop", "stop_reason": "</search>"}, "s"),
        ({"text": "<think>x</think><search> q", "finish_reason": "stop", "stop_reason": "</search>"}, "s"),
        ({"text": "<think>x</think><search> q", "finish_reason": "stop"}, "s"),
        ({"text": "<think>x</think><answer> y", "finish_reason": "stop"}, "a"),
        ({"text": "<search> q </search><answer> y </answer>", "finish_reason": "stop"}, "s"),
        ({"text": "<answer> y </answer> then <search> q </search>", "finish_reason": "stop"}, "a"),
        ({"text": "<think>x</think><answer> y", "finish_reason": "stop", "matched_stop": "</answer>"}, "a"),
        ({"text": "<think>x</think><search> q", "finish_reason": "stop", "stop_reason": None}, ""),
        ({"text": "<think>x</think><search> q", "finish_reason": "length"}, ""),
        ({"text": "<think>no action</think>", "finish_reason": "stop"}, ""),
    ],
)
def test_segment_text_in_search_r1s_protocol(choice, expected):
    from searchrl.protocols import search_r1

    text, _ = segment_text(choice, search_r1.stops(True), search_r1.STOP_OPENS)
    assert search_r1.search_query(text) == ("q" if expected == "s" else None)
    assert search_r1.answered(text) == (expected == "a")
    assert text.endswith(("</search>", "</answer>")) == bool(expected)


@pytest.mark.parametrize(
    "keep, field",
    [(True, "stop_reason"), (False, "stop_reason"), (True, None), (False, None), (False, "matched_stop")],
)
def test_vllm_serve_like_endpoint_one_end_tag_per_query(llm, retrieval, tmp_path, capsys, keep, field):
    url, behaviour, calls = llm
    behaviour.update(keep=keep, field=field, hook=None)
    assert run_local(args(url, retrieval, tmp_path)) == 0, capsys.readouterr().err[-2000:]
    assert calls[-1]["stop"] == [END_QUERY] and calls[-1]["include_stop_str_in_output"] is True
    for r in records(tmp_path / "bamboogle.jsonl"):
        trajectory = r["gen_text_store"]
        assert r["searches"] == ["Alan Turing", "Turing machine inventor"]
        assert trajectory.count(END_QUERY) == trajectory.count(BEGIN_QUERY) == r["num_searches"] == 2
        assert END_QUERY + END_QUERY not in trajectory and r["search_errors"] == 0
        assert trajectory.count("<|begin_of_documents|>\n(1)") == 2 and r["pred_ans"] == "Alan Turing"


def test_retrieval_server_down_exits_3_and_failed_questions_are_redone(llm, mini_index, tmp_path, capsys):
    url, behaviour, _ = llm
    behaviour.update(keep=True, field="stop_reason", hook=None)
    port = free_port()  # nothing listens here yet: the retrieval server is down
    down = f"http://127.0.0.1:{port}"
    assert run_local(args(url, down, tmp_path)) == 3
    assert "error: searches failed" in capsys.readouterr().err
    assert not (tmp_path / "bamboogle.jsonl").exists()  # found out before generating anything
    # Accepted: the run goes on, exits 0, and the count is still on the console and in the report.
    assert run_local(args(url, down, tmp_path, "--allow-search-errors")) == 0
    err = capsys.readouterr().err
    assert "warning: 4 searches failed, in 2 questions" in err and "allow-search-errors" in err
    table = (tmp_path / "results.md").read_text()
    assert "**4 searches failed** in 2 questions" in table and "accepted with --allow-search-errors" in table
    assert json.loads((tmp_path / "bamboogle.summary.json").read_text())["search_errors"] == 4
    # The server comes back: the same command without the flag redoes those questions.
    with serve(search_app(ServerConfig(index_dir=mini_index)), port=port):
        assert run_local(args(url, down, tmp_path)) == 0
    assert "redoing 2 questions" in capsys.readouterr().err
    done = records(tmp_path / "bamboogle.jsonl")
    assert len(done) == 2 and all(r["search_errors"] == 0 and r["num_searches"] == 2 for r in done)
    assert "searches failed" not in (tmp_path / "results.md").read_text()


def test_retrieval_server_lost_mid_run_exits_3_with_the_count(llm, mini_index, tmp_path, capsys):
    url, behaviour, _ = llm
    port = free_port()
    server = serve(search_app(ServerConfig(index_dir=mini_index)), port=port)
    server.__enter__()
    stopped = []

    def stop_on_second_segment(segment: int) -> None:
        if segment == 1 and not stopped:
            stopped.append(True)
            server.__exit__(None, None, None)

    behaviour.update(keep=True, field="stop_reason", hook=stop_on_second_segment)
    try:
        # Question 1: its first search answered, its second failed. Question 2 (the next batch): every
        # search failed, so the run stops there.
        assert run_local(args(url, f"http://127.0.0.1:{port}", tmp_path, "--batch-size", "1")) == 3
    finally:
        behaviour["hook"] = None
        if not stopped:
            server.__exit__(None, None, None)
    err = capsys.readouterr().err
    assert "error: 3 searches failed, in 2 questions (bamboogle 2)" in err and "the run stopped there" in err
    assert "**3 searches failed** in 2 questions" in (tmp_path / "results.md").read_text()
    assert [r["search_errors"] for r in records(tmp_path / "bamboogle.jsonl")] == [1, 2]


def test_resume_with_other_settings_is_refused(llm, retrieval, tmp_path, capsys):
    url, behaviour, _ = llm
    behaviour.update(keep=True, field="stop_reason", hook=None)
    assert run_local(args(url, retrieval, tmp_path, "--top-k", "3")) == 0
    first = (tmp_path / "bamboogle.jsonl").read_text()
    capsys.readouterr()
    assert run_local(args(url, retrieval, tmp_path, "--top-k", "4", "--max-searches", "3")) == 2
    err = capsys.readouterr().err
    assert "max_searches (16 -> 3)" in err and "top_k (3 -> 4)" in err and "--force-new" in err
    assert (tmp_path / "bamboogle.jsonl").read_text() == first
    # The same settings resume.
    assert run_local(args(url, retrieval, tmp_path, "--top-k", "3", "--limit", "3")) == 0
    assert len(records(tmp_path / "bamboogle.jsonl")) == 3
    assert run_local(args(url, retrieval, tmp_path, "--top-k", "4", "--force-new")) == 0
    aside = list(tmp_path.glob("replaced-*"))
    assert len(aside) == 1 and (aside[0] / "bamboogle.jsonl").read_text().count("\n") == 3
    assert len(records(tmp_path / "bamboogle.jsonl")) == 2


def test_search_identity_compares_indexes_not_urls():
    from eval.resume import differing

    index = {"model": "m", "factory": "Flat", "passages": 300, "corpus_sha256": "abc"}
    old = {"top_k": 3, "search": {"backend": "http", "index": index, "options": {}}}
    assert differing(old, {"top_k": 3, "search": {"backend": "http", "index": dict(index), "options": {}}}) == []
    assert differing(old, {"top_k": 3, "search": {"backend": "http", "index": None, "options": {}}}) == []
    other = {**index, "corpus_sha256": "def"}
    assert differing(old, {"top_k": 5, "search": {"backend": "http", "index": other, "options": {}}}) == [
        "search.index",
        "top_k",
    ]
    assert differing(old, {"top_k": 3, "search": {"backend": "local", "index": index, "options": {}}}) == [
        "search.backend"
    ]


def test_replay_cache_miss_raises(llm, tmp_path, capsys):
    from eval.run_bamboogle_online import main as online

    url, behaviour, _ = llm
    behaviour.update(keep=True, field="stop_reason", hook=None)
    code = online(
        [
            "--provider",
            "serper",
            "--replay",
            "--cache",
            str(tmp_path / "empty.sqlite"),
            "--model",
            "configs/models/qwen2.5-7b-base.yaml",
            "--engine",
            "openai",
            "--base-url",
            f"{url}/v1",
            "--limit",
            "2",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2
    assert "CacheMissError" in capsys.readouterr().err
    # No "search failed" text became model context: nothing was recorded at all.
    out = tmp_path / "out" / "bamboogle.jsonl"
    assert not out.exists() or out.read_text() == ""


def judge_args(url: str, retrieval: str, out: Path, judge_url: str, cache: Path) -> list[str]:
    return args(
        url,
        retrieval,
        out,
        "--judge-url",
        f"{judge_url}/v1",
        "--judge-model",
        "fake-judge",
        "--judge-cache",
        str(cache),
    )


def test_judge_outage_keeps_generations_and_a_later_pass_judges(llm, retrieval, tmp_path, capsys):
    url, behaviour, _ = llm
    behaviour.update(keep=True, field="stop_reason", hook=None)
    judge = FakeControl(api_key=None, mode="500")
    with serve(chat_app(judge, answer="True")) as judge_url:
        assert run_local(judge_args(url, retrieval, tmp_path / "a", judge_url, tmp_path / "cache.sqlite")) == 4
        assert "the judge gave no verdict for bamboogle 2 records" in capsys.readouterr().err
        kept = records(tmp_path / "a/bamboogle.jsonl")
        assert len(kept) == 2 and all(r["judge"] is None and r["pred_ans"] == "Alan Turing" for r in kept)
        summary = json.loads((tmp_path / "a/bamboogle.summary.json").read_text())
        assert "acc_l" not in summary and summary["judge_missing"] == 2
        judge.mode = "ok"
        calls = judge.calls
        # The judge is back: the same command generates nothing new and judges what is missing.
        assert run_local(judge_args(url, retrieval, tmp_path / "a", judge_url, tmp_path / "cache.sqlite")) == 0
        assert judge.calls == calls + 2
        summary = json.loads((tmp_path / "a/bamboogle.summary.json").read_text())
        assert summary["acc_l"] == 1.0 and summary["judge_model"] == "fake-judge" and "judge_missing" not in summary
        # Another output folder (a replay of the same run) pays nothing: the verdict cache is shared.
        assert run_local(judge_args(url, retrieval, tmp_path / "b", judge_url, tmp_path / "cache.sqlite")) == 0
        assert judge.calls == calls + 2


def test_judge_added_to_a_finished_run_and_judge_command(llm, retrieval, tmp_path, capsys):
    url, behaviour, _ = llm
    behaviour.update(keep=True, field="stop_reason", hook=None)
    judge = FakeControl(api_key=None)
    with serve(chat_app(judge, answer="True")) as judge_url:
        assert run_local(args(url, retrieval, tmp_path / "a")) == 0
        assert "acc_l" not in json.loads((tmp_path / "a/bamboogle.summary.json").read_text())
        assert run_local(judge_args(url, retrieval, tmp_path / "a", judge_url, tmp_path / "cache.sqlite")) == 0
        assert judge.calls == 2
        assert json.loads((tmp_path / "a/bamboogle.summary.json").read_text())["acc_l"] == 1.0
        assert "ACC_L" in (tmp_path / "a/results.md").read_text()
        # A results file from elsewhere (R1-Searcher's keys), judged by the command.
        from eval.judge import main as judge_main

        other = tmp_path / "other.jsonl"
        other.write_text(
            "".join(json.dumps({"question": f"q{i}", "answer": "x", "pred_ans": "x"}) + "\n" for i in range(3))
        )
        code = judge_main(
            [str(other), "--judge-url", f"{judge_url}/v1", "--judge-model", "fake-judge"]
            + ["--judge-cache", str(tmp_path / "cache.sqlite"), "--judge-key", "gpt4o_output"]
        )
        assert code == 0 and judge.calls == 5
        assert [r["gpt4o_output"] for r in records(other)] == ["True"] * 3
        assert "ACC_L=100.0" in capsys.readouterr().out
