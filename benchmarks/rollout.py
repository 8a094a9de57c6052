"""Rollout figures: the environment's own overhead per step, and replayed episodes with retrieval
per request versus batched through the retrieval server.

    python -m benchmarks.rollout [--episodes 96] [--out benchmarks/results/rollout.json]

Overhead is the agent step (parse the action, build the documents block, bookkeeping, tensors for
OpenRLHF) with search and reward answered instantly, so neither is counted. The batch comparison
runs the same replayed episodes through OpenRLHF's executor against two retrieval servers over the
bundled index, one with micro-batching off and one with it on. The multi-query comparison runs
scripted episodes that need two searches, as two single-query steps or as one two-query block.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from searchrl.jsonl import read_jsonl  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.process import free_port, start_module, stop  # noqa: E402
from searchrl.rollout.agent import Runtime, SearchAgentInstance, load_agent_executor  # noqa: E402
from searchrl.rollout.engines import ReplayEngine, SamplingParams, recorded_actions  # noqa: E402
from searchrl.rollout.environment import SearchEnvironment  # noqa: E402
from searchrl.rollout.reward_client import RewardResult  # noqa: E402
from searchrl.search.base import Passage  # noqa: E402
from searchrl.stage.config import load_stage  # noqa: E402
from searchrl.stage.templates import render_prompt  # noqa: E402

EXAMPLES = ROOT / "examples"
STAGE1 = ROOT / "configs/stages/stage1_format.yaml"


class InstantSearch:
    def __init__(self) -> None:
        self.passages = [Passage(str(i), f"Title {i}", "word " * 100, 1.0) for i in range(3)]

    async def search(self, queries, top_k):
        return [self.passages[:top_k] for _ in queries]

    async def aclose(self) -> None:
        pass


class InstantReward:
    async def score(self, query, prompt, label, metadata=None):
        return RewardResult(1.0, 1.0, {"format_ok": 1.0, "em": 1.0})

    async def aclose(self) -> None:
        pass


def overhead(records, model_cfg, stage, repeats: int) -> dict:
    Runtime.install(Runtime(stage, SearchEnvironment(InstantSearch(), stage.episode), InstantReward()))
    episodes = [
        (render_prompt(model_cfg, r["question"]), r["answer"], recorded_actions(r["gen_text_store"])) for r in records
    ]

    async def run() -> list[float]:
        per_step = []
        for _ in range(repeats):
            for prompt, label, actions in episodes:
                agent = SearchAgentInstance()
                await agent.reset({"observation": prompt, "label": label})
                for action in actions:
                    t0 = time.perf_counter()
                    out = await agent.step({"action_text": action, "observation_text": "", "label": label})
                    per_step.append(time.perf_counter() - t0)
                    if out["done"]:
                        break
        return per_step

    times = asyncio.run(run())
    Runtime.install(None)
    times.sort()
    return {
        "steps": len(times),
        "mean_ms": 1000 * statistics.mean(times),
        "p50_ms": 1000 * times[len(times) // 2],
        "p99_ms": 1000 * times[int(0.99 * (len(times) - 1))],
        "target_ms": 1.0,
        "target_met": statistics.mean(times) < 0.001,
    }


async def replay_batch(stage, jobs, tokenizer, executor) -> float:
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    try:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                executor.execute(p, label, SamplingParams(temperature=0.0), 8192, tokenizer, engine)
                for p, label, engine in jobs
            )
        )
        return time.perf_counter() - t0
    finally:
        Runtime.install(None)
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()


class TwoQuestionEngine:
    """Scripted episodes that need two searches: two single-query steps, or one step with both
    queries in one block (multi-query mode), then the answer."""

    def __init__(self, questions: list[str], multi: bool) -> None:
        self.questions = questions
        self.multi = multi

    async def generate_batch(self, prompts, params):
        from eval.generation import Completion

        out = []
        for prompt in prompts:
            i = int(prompt.split("#", 1)[1].split(":", 1)[0])
            seen = prompt.count("<|begin_of_documents|>\n(1)")
            first, second = self.questions[i % len(self.questions)], self.questions[(i + 1) % len(self.questions)]
            if self.multi and seen == 0:
                text = f"<|begin_of_query|> {first} || {second} <|end_of_query|>"
            elif not self.multi and seen < 2:
                text = f"<|begin_of_query|> {(first, second)[seen]} <|end_of_query|>"
            else:
                text = " done </think><answer> x </answer>"
            out.append(Completion(text, "stop"))
        return out


def multi_query_modes(url: str, records, episodes: int) -> dict:
    """Rollout time and searches per episode, two queries per episode, single- versus multi-query."""
    from eval.generation import GenParams, run_episodes
    from searchrl.search.http_client import HttpSearchBackend
    from searchrl.stage.config import EpisodeConfig

    questions = [r["question"] for r in records]
    out = {}
    for mode, multi in (("single_query", False), ("multi_query", True)):

        async def run(multi: bool = multi):
            backend = HttpSearchBackend(url)
            env = SearchEnvironment(backend, EpisodeConfig(top_k=3, max_queries_per_block=2 if multi else 1))
            t0 = time.perf_counter()
            done = await run_episodes(
                TwoQuestionEngine(questions, multi),
                env,
                [f"#{i}: " for i in range(episodes)],
                ["x"] * episodes,
                GenParams(),
            )
            await backend.aclose()
            return time.perf_counter() - t0, done

        seconds, done = asyncio.run(run())
        out[mode] = {
            "episodes": episodes,
            "seconds": seconds,
            "searches_per_episode": sum(r.episode.num_searches for r in done) / episodes,
            "queries_per_episode": sum(r.episode.num_queries for r in done) / episodes,
        }
        print(
            f"{mode:>13}: {episodes} episodes in {seconds:.2f} s, "
            f"{out[mode]['searches_per_episode']:.1f} search steps and "
            f"{out[mode]['queries_per_episode']:.1f} queries per episode"
        )
    return out


def batching(records, episodes: int, out_dir: Path) -> dict:
    from searchrl.search.index.build import build
    from searchrl.tiny_policy.model import build_tokenizer

    index = out_dir / "index"
    build(EXAMPLES / "mini_corpus.jsonl", "jsonl", index)
    corpus = [r["text"] for r in read_jsonl(EXAMPLES / "mini_corpus.jsonl")]
    tokenizer = build_tokenizer([r["gen_text_store"] for r in records] + [r["question"] for r in records] + corpus)
    ports = {"per_request": free_port(), "batched": free_port(), "reward": free_port()}
    procs = [
        start_module(
            "search_backend.serve",
            ["--index", str(index), "--no-batching", "--cache-size", "0"],
            ports["per_request"],
            out_dir / "per_request.log",
            180,
        ),
        start_module(
            "search_backend.serve",
            ["--index", str(index), "--cache-size", "0"],
            ports["batched"],
            out_dir / "batched.log",
            180,
        ),
        start_module("reward_server", ["--config", str(STAGE1)], ports["reward"], out_dir / "reward.log"),
    ]
    try:
        results = {}
        executor = load_agent_executor(ROOT / "stage1_format/agent_func.py")
        for mode in ("per_request", "batched"):
            stage, model_cfg = load_stage(
                STAGE1,
                [
                    f"search.urls=http://127.0.0.1:{ports[mode]}",
                    f"reward_server.urls=http://127.0.0.1:{ports['reward']}",
                ],
            )
            jobs = []
            for i in range(episodes):
                r = records[i % len(records)]
                # A distinct prompt per episode, so the replay engine and the server cache see distinct episodes.
                prompt = render_prompt(model_cfg, f"{r['question']} (#{i})")
                jobs.append((prompt, r["answer"], ReplayEngine(tokenizer, {prompt: r["gen_text_store"]})))
            seconds = asyncio.run(replay_batch(stage, jobs, tokenizer, executor))
            results[mode] = {"episodes": episodes, "seconds": seconds, "episodes_per_s": episodes / seconds}
            print(f"{mode:>12}: {episodes} episodes in {seconds:.2f} s ({episodes / seconds:.1f}/s)")
        results["speedup"] = results["per_request"]["seconds"] / results["batched"]["seconds"]
        results["multi_query"] = multi_query_modes(f"http://127.0.0.1:{ports['batched']}", records, episodes)
        return results
    finally:
        for p in procs:
            stop(p)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=96, help="concurrent replayed episodes per mode")
    p.add_argument("--repeats", type=int, default=20, help="passes over the trajectories for the overhead figure")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/rollout.json")
    p.add_argument("--work-dir", type=Path, default=ROOT / "runs/bench_rollout")
    args = p.parse_args()
    records = list(read_jsonl(EXAMPLES / "bamboogle_llama_sample.jsonl"))
    stage, model_cfg = load_stage(STAGE1)
    over = overhead(records, model_cfg, stage, args.repeats)
    print(
        f"environment overhead: {over['mean_ms']:.3f} ms/step mean, p99 {over['p99_ms']:.3f} ms "
        f"over {over['steps']} steps (target < 1 ms)"
    )
    args.work_dir.mkdir(parents=True, exist_ok=True)
    batch = batching(records, args.episodes, args.work_dir)
    result = {
        "benchmark": "rollout",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "overhead_per_step": over,
        "replayed_batch": batch,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
