"""RAG-R1's multi-query search against single queries: search rounds and wall-clock per episode, replayed.

    python -m benchmarks.multi_query [--rounds 2] [--out benchmarks/results/multi_query.json]

The replay policy re-emits R1-Searcher's recorded trajectories (examples/bamboogle_llama_sample.jsonl and the
every tenth of tests/fixtures/r1searcher/hotpotqa_llama.jsonl, 50, which search more often) through
OpenRLHF's executor and the stage-2 agent, against a retrieval server over the bundled mini index (its own
process, cache off) and a reward server. Single-query mode replays them as recorded under stage 2's config;
the `rag_r1` mode replays the same queries packed into blocks of up to three (`q1, q2, q3`) under RAG-R1's
search settings (configs/stages/rag_r1.yaml's: three queries a search, split on commas, each query's documents cut
on their own) on R1-Searcher's tags and reward, so that only the search mechanism differs, as a policy that knew all
its queries up front would send them: its rounds are the fewest the recorded queries allow. Each episode runs alone
and is timed; the two modes alternate episode by episode (which goes first alternates too), so load from elsewhere
falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tqdm import tqdm  # noqa: E402

from searchrl.jsonl import read_jsonl  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.process import free_port, start_module, stop  # noqa: E402
from searchrl.protocols.r1_searcher import BEGIN_QUERY, END_QUERY, clean_query  # noqa: E402
from searchrl.rollout.agent import Runtime, load_agent_executor  # noqa: E402
from searchrl.rollout.engines import ReplayEngine, SamplingParams, recorded_actions  # noqa: E402
from searchrl.stage.config import load_stage  # noqa: E402
from searchrl.stage.templates import effective_model, render_prompt  # noqa: E402

EXAMPLES = ROOT / "examples"
BASE_MODEL = "configs/models/qwen2.5-7b-base.yaml"
MODES = {"single_query": "configs/stages/stage2_answer.yaml", "rag_r1": "configs/stages/stage2_answer.yaml"}
# RAG-R1's search settings, read from its stage config and applied on stage 2's tags and reward.
RAG_R1 = ROOT / "configs/stages/rag_r1.yaml"
RAG_R1_KEYS = ("top_k", "max_searches", "max_queries_per_block", "query_separator", "max_tokens_per_query")


def rag_r1_overrides() -> list[str]:
    episode = load_stage(RAG_R1)[0].episode
    return [f"episode.{key}={json.dumps(getattr(episode, key))}" for key in RAG_R1_KEYS]


def packed(trajectory: str, per_block: int, separator: str) -> str:
    """The recorded trajectory with its queries sent `per_block` at a time: each block keeps the reasoning
    before its first query, the final segment is kept as recorded."""
    actions = recorded_actions(trajectory)
    searches, final = actions[:-1], actions[-1]
    out = []
    for start in range(0, len(searches), per_block):
        group = searches[start : start + per_block]
        # A comma inside a recorded query would split it under RAG-R1's separator.
        queries = [
            clean_query(a.rsplit(BEGIN_QUERY, 1)[1].rsplit(END_QUERY, 1)[0]).replace(separator, " ") for a in group
        ]
        out.append(f"{group[0].rsplit(BEGIN_QUERY, 1)[0]}{BEGIN_QUERY} {(separator + ' ').join(queries)} {END_QUERY}")
    return "".join(out) + final


async def one_episode(runtime: Runtime, prompt: str, label: Any, trajectory: str, tokenizer: Any) -> dict[str, float]:
    """One replayed episode in the mode's engine-process runtime (its HTTP clients stay open between episodes,
    as they do in training)."""
    executor = load_agent_executor(ROOT / "stage2_answer/agent_func.py")
    Runtime.install(runtime)
    try:
        t0 = time.perf_counter()
        engine = ReplayEngine(tokenizer, {prompt: trajectory})
        result = await executor.execute(prompt, label, SamplingParams(temperature=0.0), 8192, tokenizer, engine)
        seconds = time.perf_counter() - t0
    finally:
        Runtime.install(None)
    logs = {k: float(v) for k, v in result["extra_logs"].items()}
    return {
        "seconds": seconds,
        "searches": logs["num_searches"],
        "queries": logs["num_queries"],
        "reward": float(result["reward"]),
        "tokens": float(len(result["observation_tokens"])),
    }


async def alternate(
    stages, prompts, trajectories, records, rounds: int, tokenizer
) -> dict[str, list[dict[str, float]]]:
    runtimes = {mode: Runtime.from_stage(stage) for mode, stage in stages.items()}
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    try:
        jobs = [(n, i) for n in range(rounds) for i in range(len(records))]
        for n, i in tqdm(jobs, desc="episodes (both modes)"):
            for mode in list(MODES) if (n + i) % 2 == 0 else list(reversed(MODES)):
                label = records[i]["answer"]
                got = await one_episode(runtimes[mode], prompts[mode][i], label, trajectories[mode][i], tokenizer)
                runs[mode].append(got)
    finally:
        for runtime in runtimes.values():
            await runtime.rewards.aclose()
            await runtime.environment.search.aclose()
    return runs


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    seconds = sorted(r["seconds"] for r in runs)
    return {
        "episodes": len(runs),
        "searches_per_episode": statistics.mean(r["searches"] for r in runs),
        "queries_per_episode": statistics.mean(r["queries"] for r in runs),
        "seconds_per_episode_mean": statistics.mean(seconds),
        "seconds_per_episode_p50": seconds[len(seconds) // 2],
        "tokens_per_episode": statistics.mean(r["tokens"] for r in runs),
        "mean_reward": statistics.mean(r["reward"] for r in runs),
    }


def measure(records: list[dict[str, Any]], rounds: int, work: Path) -> dict[str, Any]:
    from searchrl.search.index.build import build
    from searchrl.tiny_policy.model import build_tokenizer

    index = work / "index"
    build(EXAMPLES / "mini_corpus.jsonl", "jsonl", index)
    corpus = [r["text"] for r in read_jsonl(EXAMPLES / "mini_corpus.jsonl")]
    tokenizer = build_tokenizer([r["gen_text_store"] for r in records] + [r["question"] for r in records] + corpus)
    ports = {"search": free_port(), "reward": free_port()}
    procs = [
        start_module(
            "search_backend.serve",
            ["--index", str(index), "--cache-size", "0"],
            ports["search"],
            work / "search.log",
            180,
        ),
        start_module(
            "reward_server", ["--config", str(ROOT / MODES["single_query"])], ports["reward"], work / "r.log"
        ),
    ]
    urls = [
        f"search.urls=http://127.0.0.1:{ports['search']}",
        f"reward_server.urls=http://127.0.0.1:{ports['reward']}",
    ]
    try:
        stages, prompts = {}, {}
        for mode, config in MODES.items():
            extra = rag_r1_overrides() if mode == "rag_r1" else []
            stage, model_cfg = load_stage(ROOT / config, [*urls, f"model={BASE_MODEL}", *extra])
            stages[mode] = stage
            prompts[mode] = [render_prompt(effective_model(model_cfg, stage), r["question"]) for r in records]
        episode = stages["rag_r1"].episode
        trajectories = {
            "single_query": [r["gen_text_store"] for r in records],
            "rag_r1": [
                packed(r["gen_text_store"], episode.max_queries_per_block, episode.query_separator) for r in records
            ],
        }
        runs = asyncio.run(alternate(stages, prompts, trajectories, records, rounds, tokenizer))
        result = {mode: summary(r) for mode, r in runs.items()}
        single, multi = result["single_query"], result["rag_r1"]
        result["rounds_ratio"] = multi["searches_per_episode"] / single["searches_per_episode"]
        result["seconds_ratio"] = multi["seconds_per_episode_mean"] / single["seconds_per_episode_mean"]
        return result
    finally:
        for p in procs:
            stop(p)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.multi_query", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="passes over the recorded trajectories (%(default)s)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/multi_query.json")
    p.add_argument("--work-dir", type=Path, default=ROOT / "runs/bench_multi_query")
    args = p.parse_args(argv)
    records = list(read_jsonl(EXAMPLES / "bamboogle_llama_sample.jsonl"))
    records += list(read_jsonl(ROOT / "tests/fixtures/r1searcher/hotpotqa_llama.jsonl"))[::10]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "multi_query",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "recordings": "examples/bamboogle_llama_sample.jsonl + tests/fixtures/r1searcher/hotpotqa_llama.jsonl[::10]",
        "rounds": args.rounds,
        **measure(records, args.rounds, args.work_dir),
    }
    for mode in MODES:
        r = result[mode]
        print(
            f"{mode:>13}: {r['searches_per_episode']:.2f} search rounds, {r['queries_per_episode']:.2f} queries, "
            f"{1000 * r['seconds_per_episode_mean']:.0f} ms per episode, p50 {1000 * r['seconds_per_episode_p50']:.0f}"
        )
    print(f"rag_r1 / single: rounds x{result['rounds_ratio']:.2f}, wall-clock x{result['seconds_ratio']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
