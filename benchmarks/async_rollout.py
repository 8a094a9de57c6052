"""Sync against async training under slow search: the same stage-1 rehearsal (OpenRLHF's own train_ppo_ray on
CPU, `searchrl stage rehearse stage1 --train`), run with the default schedule and with `--async` /
`--partial-rollout`, one after the other and in alternating order, with a retrieval server that adds a web
provider's delay to every search.

    python -m benchmarks.async_rollout --out DIR [--latencies 0,0.5,2] [--steps 6] [--rounds 1]
        [--schedules sync,async-partial] [--eval-samples 2]

Per run, from OpenRLHF's own step lines and TensorBoard timings: rollout steps and samples per hour at the
steady pace (first step's end to the last's: start-up left out), the share of that time the trainer was busy
(make-experience and PPO updates), the time split per step, the most a schedule that hid everything but the
trainer's work and the weight broadcast could gain over the run (`overlap_bound`: step time over that unhidden
time; for a sync run, async's ceiling), the off-policy figures OpenRLHF logs under async
(`vllm_kl`, `is_filter_ratio`), and the format-and-search rate of the final checkpoint on the 100 held-out
stage-1 questions, sampled outside training (benchmarks.learning's evaluation). Writes DIR/async_rollout.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.learning import Servers, evaluate  # noqa: E402
from benchmarks.tables import save  # noqa: E402
from searchrl.process import exit_on_sigterm, free_port, start_module, stop  # noqa: E402
from searchrl.rehearsal import training as train_rehearsal  # noqa: E402
from searchrl.rehearsal.inputs import rehearsal_index  # noqa: E402

BUSY = ("timing/make_experience", "timing/ppo_train")
# What a step cannot overlap under any schedule: the trainer's own work and the weight broadcast.
UNHIDDEN = ("make_experience", "ppo_train", "broadcast")


def overlap_bound(split: dict[str, float]) -> float | None:
    """How many times faster than this run a schedule that hid all else (generation, its search waits) could step:
    the step's time over the time its trainer and weight broadcast took. For a sync run, the most async can gain."""
    unhidden = sum(split.get(k, 0.0) for k in UNHIDDEN)
    return round(split["step_total"] / unhidden, 3) if unhidden and "step_total" in split else None


def pace(result: dict[str, Any]) -> dict[str, Any]:
    """Steady-state figures of one run: the steps after the first, over the time they took."""
    clock = result["step_clock"]
    curves = [c for _, c in sorted((int(k), v) for k, v in result["curves"].items())]
    span = clock[-1] if len(clock) > 1 else None
    flags = {o["flag"]: o["value"] for o in result["overrides"]}
    samples = flags["rollout.batch_size"] * flags["rollout.n_samples_per_prompt"]
    later = curves[1:]
    timings = sorted({k for c in later for k in c if k.startswith("timing/")})
    split = {k.split("/", 1)[1]: round(statistics.mean(c.get(k, 0.0) for c in later), 2) for k in timings}
    off_policy = {
        k: round(statistics.mean(c[k] for c in curves if k in c), 4)
        for k in ("vllm_kl", "is_filter_ratio")
        if any(k in c for c in curves)
    }
    busy = sum(c.get(k, 0.0) for c in later for k in BUSY)
    return {
        "steps": len(clock),
        "steady_seconds": span,
        "steps_per_hour": round((len(clock) - 1) * 3600 / span, 1) if span else None,
        "samples_per_hour": round((len(clock) - 1) * samples * 3600 / span, 1) if span else None,
        "trainer_busy_share": round(busy / span, 3) if span else None,
        "mean_step_split_s": split,
        "overlap_bound": overlap_bound(split),
        "train_score_last": result.get("score_last"),
        **off_policy,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.async_rollout", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--latencies", default="0,0.5,2", help="seconds added to each search, comma-separated")
    p.add_argument("--steps", type=int, default=6, help="rollout steps a run")
    p.add_argument("--rounds", type=int, default=1, help="runs of each schedule at each latency")
    p.add_argument("--schedules", default="sync,async-partial", help="schedules compared, comma-separated")
    p.add_argument("--eval-samples", type=int, default=2, help="samples per held-out question (0: no evaluation)")
    p.add_argument("--lr", type=float, default=train_rehearsal.DEFAULT_LR)
    args = p.parse_args(argv)
    exit_on_sigterm()
    latencies = [float(x) for x in args.latencies.split(",") if x.strip()]
    schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs",
        "steps": args.steps,
        "lr": args.lr,
        "runs": [],
    }
    # Async runs its engine beside the actor: one head with a logical GPU for each, shared by every run.
    servers = Servers(args.out, parallel=2)
    index = rehearsal_index()
    t0 = time.monotonic()
    try:
        for latency in latencies:
            port = free_port()
            log = args.out / f"retrieval-{latency}.log"
            server = start_module(
                "search_backend.serve", ["--index", str(index), "--latency-s", str(latency)], port, log, 300
            )
            try:
                for r in range(args.rounds):
                    # Alternating order, so that neither schedule always runs on a warmer machine.
                    order = schedules if r % 2 == 0 else schedules[::-1]
                    for schedule in order:
                        out = args.out / f"latency{latency}" / f"{schedule}-r{r}"
                        print(f"[async_rollout] latency {latency} s, {schedule}, round {r}", flush=True)
                        result = train_rehearsal.train(
                            "stage1", None, [f"schedule={schedule}"], args.steps, resume=False, out=out, lr=args.lr,
                            head=servers.head, search_url=f"http://127.0.0.1:{port}", label=f"{schedule} {latency}s",
                        )  # fmt: skip
                        entry = {"latency_s": latency, "schedule": schedule, "round": r,
                                 "trainer": result["trainer"], **pace(result)}  # fmt: skip
                        if args.eval_samples:
                            ev = evaluate(Path(result["hf_checkpoint"]), "stage1", servers, args.eval_samples, 0, [])
                            entry["heldout_score"] = ev["score"]
                        print(f"[async_rollout] {json.dumps(entry)}", flush=True)
                        report["runs"].append(entry)
                        save(report, args.out / "async_rollout.json")
            finally:
                stop(server)
    finally:
        servers.close()
    report["seconds"] = round(time.monotonic() - t0, 1)
    report["ratios"] = ratios(report["runs"], schedules)
    save(report, args.out / "async_rollout.json")
    print(json.dumps(report["ratios"], indent=1))
    return 0


def ratios(runs: list[dict[str, Any]], schedules: list[str]) -> list[dict[str, Any]]:
    """Per latency, each schedule's samples per hour against the first schedule's, and the held-out gap."""
    out = []
    base = schedules[0]
    for latency in sorted({r["latency_s"] for r in runs}):
        at = {s: [r for r in runs if r["latency_s"] == latency and r["schedule"] == s] for s in schedules}
        ref = [r["samples_per_hour"] for r in at[base] if r["samples_per_hour"]]
        for s in schedules[1:]:
            got = [r["samples_per_hour"] for r in at[s] if r["samples_per_hour"]]
            row: dict[str, Any] = {"latency_s": latency, "schedule": s, "against": base}
            if ref and got:
                row["samples_per_hour_ratio"] = round(statistics.mean(got) / statistics.mean(ref), 3)
            bounds = [b for r in at[base] if (b := overlap_bound(r.get("mean_step_split_s", {}))) is not None]
            if bounds:
                row[f"{base}_overlap_bound"] = round(statistics.mean(bounds), 3)
            scores = {
                k: [r["heldout_score"] for r in v if "heldout_score" in r] for k, v in ((base, at[base]), (s, at[s]))
            }
            if all(scores.values()):
                row["heldout_score_gap"] = round(statistics.mean(scores[s]) - statistics.mean(scores[base]), 3)
            out.append(row)
    return out


if __name__ == "__main__":
    sys.exit(main())
