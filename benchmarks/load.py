"""Sustained load on both servers, every answer checked against the in-process result.

    python benchmarks/load.py [--reward-requests 100000] [--search-requests 20000] [--concurrency 64 512]

Loopback only, bounded in count and time. The reward server scores R1-Searcher's released
trajectories (each answer compared with the in-process reward and score); the retrieval server
answers 1,000 real queries over the bundled mini index (ids compared with the in-process search).
Reports sent, lost (no answer or an error status), wrong, slow (over 1 s), p50/p99/max, and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.loadgen import LoadResult, closed_loop  # noqa: E402
from eval.metrics import as_golds  # noqa: E402
from eval.records import read_jsonl  # noqa: E402
from reward_server.scoring import score_solution  # noqa: E402
from reward_server.spec import PRESETS  # noqa: E402
from rollout.service import free_port, start_module, stop  # noqa: E402

PROMPT = "User:{q}\nAssistant: <think>"
TRAJECTORIES = [
    ROOT / "tests/fixtures/r1searcher/hotpotqa_llama.jsonl",
    ROOT / "tests/fixtures/r1searcher/bamboogle_llama.jsonl",
]
QUERIES = ROOT / "tests/fixtures/search/queries_1000.txt"


def run_levels(
    url: str, path: str, bodies: list[bytes], check, total: int, levels: list[int], prefix: bytes, limit_s: float
) -> list[dict]:
    rows = []
    for c in levels:
        n = total // len(levels)
        result: LoadResult = asyncio.run(
            closed_loop(url, path, bodies, c, limit_s, ok_prefix=prefix, check=check, max_requests=n)
        )
        row = {"concurrency": c, "sent": result.requests + result.errors, "lost": result.errors, **asdict(result)}
        rows.append(row)
        print(
            f"{path} c={c:>4}: sent {row['sent']:>6}  lost {row['lost']}  wrong {result.wrong}  slow {result.slow}  "
            f"p50 {result.p50_ms:.1f} ms  p99 {result.p99_ms:.1f} ms  max {result.max_ms:.1f} ms  "
            f"({result.rps:.0f} req/s)",
            flush=True,
        )
    return rows


def reward_load(total: int, levels: list[int], limit_s: float, work: Path) -> list[dict]:
    records = [r for path in TRAJECTORIES for r in read_jsonl(path)]
    spec = PRESETS["r1searcher-qwen-stage2"]
    bodies, expected = [], []
    for r in records:
        prompt = PROMPT.format(q=r["question"])
        body = {"query": [prompt + r["gen_text_store"]], "prompts": [prompt], "labels": [r["answer"]]}
        bodies.append(json.dumps(body).encode())
        want = score_solution(r["gen_text_store"], as_golds(r["answer"]), spec)
        expected.append((want.reward, want.score))

    def check(i: int, payload: bytes) -> bool:
        got = json.loads(payload)
        return (got["rewards"][0], got["scores"][0]) == expected[i]

    port = free_port()
    proc = start_module("reward_server", ["--preset", "r1searcher-qwen-stage2"], port, work / "reward.log")
    try:
        return run_levels(
            f"http://127.0.0.1:{port}", "/get_reward", bodies, check, total, levels, b'{"rewards"', limit_s
        )
    finally:
        stop(proc)


def search_load(total: int, levels: list[int], limit_s: float, work: Path) -> list[dict]:
    from search_backend.build_index import build
    from search_backend.local_faiss import LocalFaissBackend

    index = work / "index"
    build(ROOT / "examples/mini_corpus.jsonl", "jsonl", index)
    queries = QUERIES.read_text(encoding="utf-8").splitlines()
    expected = [[p.id for p in hits] for hits in LocalFaissBackend(index).search_sync(queries, 3)]
    bodies = [json.dumps({"queries": [q], "top_k": 3}).encode() for q in queries]

    def check(i: int, payload: bytes) -> bool:
        return [p["id"] for p in json.loads(payload)["results"][0]] == expected[i]

    port = free_port()
    proc = start_module(
        "search_backend.serve", ["--index", str(index), "--threads", "1"], port, work / "retrieval.log", 180
    )
    try:
        return run_levels(f"http://127.0.0.1:{port}", "/search", bodies, check, total, levels, b'{"results"', limit_s)
    finally:
        stop(proc)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reward-requests", type=int, default=100_000)
    p.add_argument("--search-requests", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 512])
    p.add_argument("--limit-s", type=float, default=600.0, help="time cap per concurrency level")
    p.add_argument("--work-dir", type=Path, default=ROOT / "runs/bench_load")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/load.json")
    args = p.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    reward = reward_load(args.reward_requests, args.concurrency, args.limit_s, args.work_dir)
    search = search_load(args.search_requests, args.concurrency, args.limit_s, args.work_dir)
    result = {
        "benchmark": "load",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.time() - started, 1),
        "reward_server": reward,
        "retrieval_server": search,
        "lost": sum(r["lost"] for r in reward + search),
        "wrong": sum(r["wrong"] for r in reward + search),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"lost {result['lost']}, wrong {result['wrong']}; wrote {args.out}")
    return 0 if result["lost"] == 0 and result["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
