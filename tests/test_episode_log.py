"""The episodes a run keeps (searchrl/episodes/): the per-step sample each process writes and its bound, the agent's
records through OpenRLHF's own agent loop against a real retrieval server over a FAISS index and a real reward
server on loopback, an evaluation's records, where a planned job puts them, and the reader's steps from TensorBoard."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from eval.replay import ReplayTextEngine
from eval.runner import Run, RunSettings, evaluate
from reward_server.app import ServerSettings, create_app
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as create_search_app
from searchrl.config import ConfigError, load
from searchrl.episodes.reader import read_run
from searchrl.episodes.record import EpisodeRecord
from searchrl.episodes.sampler import EpisodeSampler
from searchrl.job.plan import plan_stage, runtime_env
from searchrl.protocols import get_protocol
from searchrl.rollout.agent import Runtime, episode_sampler, load_agent_executor
from searchrl.rollout.engines import SamplingParams
from searchrl.stage.config import CONFIG_JSON_ENV, EpisodeConfig, ModelConfig, episode_share, load_stage
from searchrl.stage.templates import render_prompt
from tests.conftest import ROOT, serve
from tests.test_search_fixtures import fixture_backend, fixture_index
from tests.test_search_r1_loop import ScriptedEngine

PROMPT = "Question: Who carried out the 2009 Fort Hood shooting?\n"
LABEL = '["Nidal Hasan", "Nidal Malik Hasan"]'
R1_SEARCH = "I should look this up. <|begin_of_query|> 2009 Fort Hood shooting <|end_of_query|>"
R1_ANSWER = " The documents name the shooter. </think><answer> Nidal Hasan </answer>"
# Two answers: the answer_count format rule is broken.
R1_TWICE = " </think><answer> Nidal Hasan </answer> or <answer> Hasan </answer>"
SR1_SEARCH = "<think> look it up </think><search> 2009 Fort Hood shooting </search>"
SR1_ANSWER = "<think> found it </think><answer> Nidal Hasan </answer>"
STAGES = {"r1-searcher": "stage2_answer", "search-r1": "search_r1"}


def record(i: int = 0, **fields) -> EpisodeRecord:
    base = {"time": 1.0, "source": "train", "protocol": "r1-searcher", "prompt": f"p{i}", "solution": "s", "reward": 0}
    return EpisodeRecord.model_validate({**base, **fields})


def window_files(folder: Path, pid: int = os.getpid()) -> list[Path]:
    return sorted(folder.glob(f"{socket.gethostname()}-{pid}-w*.jsonl"))


def window_of(path: Path) -> int:
    return int(path.name.rsplit("-w", 1)[1].removesuffix(".jsonl"))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_of_each_share_the_first_per_step_are_kept_one_file_a_window(tmp_path):
    sampler = EpisodeSampler(tmp_path, per_step=2, share=5, max_windows=10)
    built: list[int] = []

    def build(i: int):
        built.append(i)
        return record(i)

    kept = [sampler.offer(lambda i=i: build(i)) for i in range(12)]
    sampler.close()
    assert [i for i, k in enumerate(kept) if k] == [0, 1, 5, 6, 10, 11] == built  # the others are never built
    files = window_files(tmp_path)
    assert [window_of(f) for f in files] == [0, 1, 2]
    assert [[r["prompt"] for r in lines(f)] for f in files] == [["p0", "p1"], ["p5", "p6"], ["p10", "p11"]]


def test_two_processes_write_side_by_side_and_the_reader_reads_both(tmp_path):
    folder = str(tmp_path / "episodes")
    child = (
        "import os; from searchrl.episodes.sampler import EpisodeSampler; from searchrl.episodes.record import "
        f"EpisodeRecord as R; s = EpisodeSampler({folder!r}, 2, 3, 4)\n"
        "for i in range(6): s.write(R(time=1.0, source='train', protocol='search-r1', prompt=f'child{i}', "
        "solution='x', reward=1.0))\n"
        "print(os.getpid())"
    )
    sampler = EpisodeSampler(tmp_path / "episodes", 2, 3, 4)
    for i in range(6):
        sampler.write(record(i, prompt=f"parent{i}"))
    sampler.close()
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, check=True)
    child_pid = int(done.stdout.strip())
    assert child_pid != os.getpid()
    host = re.escape(socket.gethostname())
    names = sorted(p.name for p in (tmp_path / "episodes").iterdir())
    assert len(names) == 4 and all(re.fullmatch(rf"{host}-\d+-w\d{{6}}\.jsonl", n) for n in names)
    assert len(window_files(tmp_path / "episodes")) == len(window_files(tmp_path / "episodes", child_pid)) == 2
    prompts = sorted(r.prompt for r in read_run(tmp_path).episodes)
    assert prompts == ["child0", "child1", "child3", "child4", "parent0", "parent1", "parent3", "parent4"]


def test_a_long_run_stays_bounded_in_files_and_bytes_and_spans_the_run(tmp_path):
    other = tmp_path / "otherhost-1-w000000.jsonl"  # another process's file: never this one's to thin
    other.write_text(record().model_dump_json() + "\n")
    windows, per_step, limit = 10_000, 2, 50
    sampler = EpisodeSampler(tmp_path, per_step=per_step, share=3, max_windows=limit)
    one = len(record(0, prompt="p0000000").model_dump_json()) + 1
    for i in range(windows * 3):
        sampler.offer(lambda i=i: record(i, prompt=f"p{i:07d}", id="0" * 32))
        assert len(sampler.windows) <= limit
    sampler.close()
    files = window_files(tmp_path)
    kept = [window_of(f) for f in files]
    assert len(files) <= limit and other.is_file()
    assert sum(f.stat().st_size for f in files) <= limit * per_step * one
    assert all(len(lines(f)) == per_step for f in files)
    # The first window and the newest are kept, the newer half whole, and the older half spread over the whole run
    # at power-of-two strides (thinning by place in the list would have left the first and the last few dozen only).
    recent = limit // 2 - 1
    assert kept[0] == 0 and kept[-recent:] == list(range(windows - recent, windows))
    assert max(b - a for a, b in zip(kept, kept[1:], strict=False)) <= windows // (limit // 4)
    assert all(w % 128 == 0 for w in kept if w < windows // 2) and len([w for w in kept if w < windows // 4]) > 2


def test_a_file_system_error_is_logged_once_and_never_raised(tmp_path, caplog):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    sampler = EpisodeSampler(blocked / "episodes", per_step=3, share=3, max_windows=4)
    with caplog.at_level(logging.WARNING, logger="searchrl.episodes.sampler"):
        assert [sampler.write(record(i)) for i in range(6)] == [False] * 6
    warnings = [r.getMessage() for r in caplog.records if r.name == "searchrl.episodes.sampler"]
    assert len(warnings) == 1 and str(blocked / "episodes") in warnings[0] and sampler.broken

    # Broken mid-run: what was written stays, and the sampler stops at the next window.
    caplog.clear()
    folder = tmp_path / "live"
    sampler = EpisodeSampler(folder, per_step=1, share=1, max_windows=4)
    assert sampler.write(record(0))
    shutil.rmtree(folder)
    folder.write_text("")
    with caplog.at_level(logging.WARNING, logger="searchrl.episodes.sampler"):
        assert not sampler.write(record(1)) and not sampler.write(record(2))
    assert len([r for r in caplog.records if r.name == "searchrl.episodes.sampler"]) == 1


def test_a_record_that_cannot_be_built_is_left_out_and_the_rest_are_kept(tmp_path):
    sampler = EpisodeSampler(tmp_path / "episodes", per_step=3, share=3, max_windows=4)

    def broken():
        raise KeyError("em")

    assert [sampler.offer(broken), sampler.write(record(1)), sampler.write(record(2))] == [False, True, True]
    sampler.close()
    assert [r.prompt for r in read_run(tmp_path).episodes] == ["p1", "p2"] and sampler.unbuilt == 1


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(ROOT / "examples/tiny_policy_search_r1")


@pytest.fixture(scope="module")
def servers():
    """A retrieval server over the FAISS fixture index and a reward server for each protocol's stage."""
    specs = {p: load_stage(ROOT / f"configs/stages/{s}.yaml")[0].reward for p, s in STAGES.items()}
    with serve(create_search_app(ServerConfig(index_dir=fixture_index()))) as search_url:
        with serve(create_app(ServerSettings(spec=specs["r1-searcher"]))) as r1_url:
            with serve(create_app(ServerSettings(spec=specs["search-r1"]))) as sr1_url:
                yield search_url, {"r1-searcher": r1_url, "search-r1": sr1_url}


def stage_for(servers, protocol: str, folder: Path, *overrides: str):
    search_url, reward_urls = servers
    return load_stage(
        ROOT / f"configs/stages/{STAGES[protocol]}.yaml",
        [
            f"search.urls={search_url}",
            f"reward_server.urls={reward_urls[protocol]}",
            "search.retries=0",
            f"episodes.dir={folder}",
            *overrides,
        ],
    )[0]


async def run_episodes(stage, tokenizer, scripts: list[list[str]]) -> list[dict]:
    """Each script one episode through the stage's agent file (OpenRLHF's MultiTurnAgentExecutor), all in one
    process's runtime, as an engine runs its share of a step."""
    executor = load_agent_executor(ROOT / stage.stage / "agent_func.py")
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    flags = stage.openrlhf
    try:
        results = []
        for turns in scripts:
            params = SamplingParams(temperature=0.0, max_tokens=flags["rollout.max_new_tokens"])
            engine = ScriptedEngine(tokenizer, turns)
            results.append(await executor.execute(PROMPT, LABEL, params, flags["data.max_len"], tokenizer, engine))
        return results
    finally:
        Runtime.install(None)
        if runtime.episodes is not None:
            runtime.episodes.close()
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()


def test_the_agent_keeps_its_share_and_the_reader_shows_turns_reward_and_violations(servers, tokenizer, tmp_path):
    # A share of 2 (2 prompts x 1 sample over 1 engine), 1 kept: episodes 1 and 3 of 4 are written.
    share = ["openrlhf.rollout.batch_size=2", "openrlhf.rollout.n_samples_per_prompt=1", "openrlhf.vllm.num_engines=1"]
    stage = stage_for(servers, "r1-searcher", tmp_path / "episodes", "episodes.per_step=1", *share)
    scripts = [[R1_SEARCH, R1_ANSWER], [R1_ANSWER], [R1_SEARCH, R1_TWICE], [R1_ANSWER]]
    results = asyncio.run(run_episodes(stage, tokenizer, scripts))
    run = read_run(tmp_path)
    assert [len(lines(f)) for f in window_files(tmp_path / "episodes")] == [1, 1]
    clean, broken = run.episodes
    # What OpenRLHF was handed (its tensors float32): the reward, the score and every extra_logs figure.
    assert clean.reward == results[0]["reward"] == 1.0 and broken.reward < 0
    assert broken.reward == pytest.approx(results[2]["reward"])
    for kept, result in ((clean, results[0]), (broken, results[2])):
        assert kept.components == pytest.approx({k: float(v) for k, v in result["extra_logs"].items()})
        assert kept.score == pytest.approx(float(result["scores"]))
    assert (clean.source, clean.protocol, clean.step, clean.prompt) == ("train", "r1-searcher", 1, PROMPT)
    assert clean.gold == ["Nidal Hasan", "Nidal Malik Hasan"] and clean.answer == "Nidal Hasan"
    assert clean.queries == ["2009 Fort Hood shooting"] and clean.components["num_searches"] == 1.0
    assert clean.violations == [] and broken.violations == ["answer_count"]
    search, answer = clean.turns()
    assert search.text.startswith(R1_SEARCH) and search.query == "2009 Fort Hood shooting"
    assert search.documents.startswith("<|begin_of_documents|>") and "Hasan" in search.documents
    assert answer.text.strip() == R1_ANSWER.strip() and answer.query is None
    assert clean.prompt_tokens == len(tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
    assert clean.response_tokens == len(tokenizer(clean.solution, add_special_tokens=False)["input_ids"])
    assert clean.seconds >= clean.search_seconds > 0


def test_a_search_r1_record_reads_by_the_same_reader_its_cut_observation_and_all(servers, tokenizer, tmp_path):
    stage = stage_for(servers, "search-r1", tmp_path / "episodes")
    [result] = asyncio.run(run_episodes(stage, tokenizer, [[SR1_SEARCH, SR1_ANSWER]]))
    [kept] = read_run(tmp_path).episodes
    assert (kept.protocol, kept.queries) == ("search-r1", ["2009 Fort Hood shooting"])
    assert kept.reward == pytest.approx(result["reward"])
    search, answer = kept.turns()
    assert search.query == "2009 Fort Hood shooting" and search.documents.startswith("<information>")
    # Its observation was cut to episode.max_observation_tokens, closing tag and all: the recorded offsets still
    # end it where the environment did, so the answer turn after it is its own.
    assert "</information>" not in search.documents and answer.text == SR1_ANSWER
    assert kept.answer == "Nidal Hasan" and "invalid_actions" in kept.components


def test_writing_never_fails_an_episode(servers, tokenizer, tmp_path, caplog):
    (tmp_path / "a-file").write_text("")
    stage = stage_for(servers, "r1-searcher", tmp_path / "a-file" / "episodes")
    with caplog.at_level(logging.WARNING, logger="searchrl.episodes.sampler"):
        [result] = asyncio.run(run_episodes(stage, tokenizer, [[R1_SEARCH, R1_ANSWER]]))
    assert result["reward"] == 1.0
    assert any("a-file" in r.getMessage() for r in caplog.records if r.name == "searchrl.episodes.sampler")


def test_steps_come_from_the_tensorboard_times(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tensorboard"))
    writer.add_scalar("train/reward", 0.25, 1, walltime=1000.0)
    writer.add_scalar("train/reward", 0.75, 2, walltime=2000.0)
    writer.close()
    sampler = EpisodeSampler(tmp_path / "episodes", 10, 10, 4)
    for t in (2500.0, 500.0, 1500.0, 1000.0):
        sampler.write(record(int(t), time=t))
    sampler.write(record(7, time=100.0, step=7))
    sampler.close()
    run = read_run(tmp_path)
    # Before step 1 was logged: step 1; at its time: still 1; between: 2; after the last: the step in progress.
    assert [(r.prompt, r.step) for r in run.episodes] == [
        ("p500", 1), ("p1000", 1), ("p1500", 2), ("p2500", 3), ("p7", 7)
    ]  # fmt: skip
    assert run.curves["reward"] == [(1, 0.25), (2, 0.75)] and run.steps == [1, 2, 3, 7]


def test_an_evaluation_keeps_every_episode_beside_its_results(tmp_path):
    rows = [json.loads(line) for line in (ROOT / "examples/bamboogle_llama_sample.jsonl").open(encoding="utf-8")][:3]
    model = load(ModelConfig, ROOT / "configs/models/qwen2.5-7b-base.yaml")
    protocol = get_protocol("r1-searcher")
    prompt = {r["question"]: render_prompt(model, r["question"], None, protocol.PROMPT_END) for r in rows}
    engine = ReplayTextEngine({prompt[r["question"]]: r["gen_text_store"] for r in rows})
    run = Run(model, engine, fixture_backend(), EpisodeConfig(top_k=3, max_searches=8), RunSettings(batch_size=2),
              tmp_path)  # fmt: skip
    questions = [{"idx": i, "question": r["question"], "answer": r["answer"]} for i, r in enumerate(rows)]
    asyncio.run(evaluate("bamboogle_sample.jsonl", run, questions))
    results = lines(tmp_path / "bamboogle_sample.jsonl")
    assert set(results[0]) == {
        "idx", "question", "answer", "pred_ans", "has_answer", "gen_text_store", "searches", "num_searches",
        "search_errors", "truncated", "metrics", "judge", "judge_model",
    }  # fmt: skip
    episodes = read_run(tmp_path).episodes
    assert len(episodes) == 3 and {e.source for e in episodes} == {"eval"} and {e.step for e in episodes} == {0}
    by_prompt = {e.prompt: e for e in episodes}
    for row, result in zip(rows, results, strict=True):
        kept = by_prompt[prompt[row["question"]]]
        assert kept.solution == result["gen_text_store"] and kept.queries == result["searches"]
        assert kept.gold == [row["answer"]] and (kept.answer or "") == result["pred_ans"]
        assert kept.reward == kept.components["em"] == result["metrics"]["em"]
        assert kept.components["num_searches"] == result["num_searches"] == len(kept.queries)
        assert [t.query for t in kept.turns() if t.query] == result["searches"]


def test_a_planned_job_keeps_its_episodes_beside_its_tensorboard_folder(tmp_path):
    plan = plan_stage("stage1", None, [])
    stage = plan["stage"]
    # What every engine reads: the stage config inline in the job's env_vars, its folder absolute.
    inline = json.loads(runtime_env(plan)["env_vars"][CONFIG_JSON_ENV])["episodes"]
    assert inline["dir"] == stage.episodes.dir == str(ROOT / "runs/stage1_format/episodes")
    assert (inline["per_step"], inline["max_windows"]) == (8, 500)
    flags = stage.openrlhf
    share = flags["rollout.batch_size"] * flags["rollout.n_samples_per_prompt"] // flags["vllm.num_engines"]
    assert episode_share(flags) == share
    sampler = episode_sampler(stage)
    assert sampler is not None and (sampler.share, sampler.per_step) == (share, 8)
    assert str(sampler.directory) == stage.episodes.dir

    moved = plan_stage("stage1", None, [f"openrlhf.logger.tensorboard_dir={tmp_path}/run/tb"])["stage"]
    assert moved.episodes.dir == str(tmp_path / "run/episodes")
    relative = plan_stage("stage1", None, ["episodes.dir=runs/mine/episodes"])["stage"]
    assert relative.episodes.dir == str(ROOT / "runs/mine/episodes")
    off = plan_stage("stage1", None, ["episodes.per_step=0"])["stage"]
    assert off.episodes.dir is None and episode_sampler(off) is None
    # A config no plan resolved (a test's, the quickstart's) writes nowhere under runs/.
    assert episode_sampler(load_stage(ROOT / "configs/stages/stage1_format.yaml")[0]) is None


@pytest.mark.parametrize(
    "override,named",
    [("episodes.per_step=-1", "episodes.per_step"), ("episodes.max_windows=3", "episodes.max_windows"),
     ("episodes.dir=", "episodes.dir"), ("episodes.keep=all", "episodes.keep")],
)  # fmt: skip
def test_a_bad_episodes_setting_is_refused_by_name(override, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_stage(ROOT / "configs/stages/stage1_format.yaml", [override])
