"""Quickstart on embedded defaults: score bundled R1-Searcher trajectories through a real reward server.

Starts the reward server twice on loopback (stage-1 and stage-2 configs), sends every bundled
trajectory as OpenRLHF would (prompt + response, prompt, label), checks each reward against the
in-process scorer, and writes a JSON summary. Exit code 1 when any reward disagrees.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eval.metrics import as_golds  # noqa: E402
from eval.records import read_jsonl  # noqa: E402
from reward_server.scoring import score_solution  # noqa: E402
from rollout.config import load_stage  # noqa: E402
from rollout.service import free_port, start_module, stop  # noqa: E402
from rollout.templates import render_prompt  # noqa: E402

STAGES = ("stage1_format", "stage2_answer")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trajectories", default=str(ROOT / "examples/bamboogle_llama_sample.jsonl"))
    p.add_argument("--out", default=str(ROOT / "runs/quickstart"), help="folder for summary.json and the server logs")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = list(read_jsonl(args.trajectories))
    summary: dict[str, dict] = {}
    mismatches = 0
    for stage in STAGES:
        config = ROOT / f"configs/stages/{stage}.yaml"
        stage_cfg, model_cfg = load_stage(config)
        port = free_port()
        log = out / f"reward_server_{stage}.log"
        print(f"[quickstart] {stage}: reward server on 127.0.0.1:{port} (log: {log})")
        proc = start_module(
            "reward_server", ["--config", str(config), "--log-jsonl", str(out / f"{stage}.jsonl")], port, log
        )
        try:
            rewards = []
            t0 = time.perf_counter()
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                for r in records:
                    prompt = render_prompt(model_cfg, r["question"])
                    body = {"query": [prompt + r["gen_text_store"]], "prompts": [prompt], "labels": [r["answer"]]}
                    resp = client.post("/get_reward", json=body)
                    resp.raise_for_status()
                    got = resp.json()["rewards"][0]
                    want = score_solution(r["gen_text_store"], as_golds(r["answer"]), stage_cfg.reward).reward
                    mismatches += got != want
                    rewards.append(got)
            elapsed = time.perf_counter() - t0
        finally:
            stop(proc)
        summary[stage] = {"n": len(rewards), "mean_reward": sum(rewards) / len(rewards), "seconds": round(elapsed, 3)}
        print(f"[quickstart] {stage}: {len(rewards)} trajectories, mean reward {summary[stage]['mean_reward']:.4f}")
    print()
    print(f"{'question':<60} {'gold':<22} {'answer':<22}")
    for r in records[:10]:
        print(f"{r['question'][:58]:<60} {r['answer'][:20]:<22} {str(r.get('pred_ans'))[:20]:<22}")
    (out / "summary.json").write_text(json.dumps({"stages": summary, "mismatches": mismatches}, indent=2))
    print(
        f"\n[quickstart] summary: {out / 'summary.json'}; rewards disagreeing with the in-process scorer: {mismatches}"
    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
