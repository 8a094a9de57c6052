"""On paper: what OpenRLHF's async schedule would do for a 7B policy on one 8-GPU node with a web search provider.

    python -m benchmarks.async_projection [--gpu benchmarks/results/gpu_split.json]
        [--latencies 0,0.5,2,3] [--sync-s 5] [--out benchmarks/results/async_projection.json]

Inputs, each named in the output: the GPU figures `benchmarks/gpu_split.py` measured on one GPU for a Qwen2.5-7B
shape (forward+backward and no-grad tokens/s, prefill tokens/s, decode ms per step at the largest batch); the
episode shape of R1-Searcher's released Llama trajectories (tests/fixtures/r1searcher, characters / 4 as tokens);
the stage files' batch (64 prompts x 16 samples); and the critical path the CPU benchmark measured
(`benchmarks/results/async_rollout.json`: how many searches' worth of latency a step's generation waits).

The model of one rollout step:
- training = (actor forward+backward + two no-grad passes, old and reference log-probs) over every token of the
  batch, data-parallel over the training GPUs (ZeRO-3's traffic left out, so it is a floor);
- generation = the longer of the engines' throughput (prefill of prompts and documents, decode of the policy's
  tokens) and the batch's critical path (its longest episode decoded token by token, plus a search latency for
  each of its searches);
- sync: colocated (all 8 GPUs take turns) = generation + training + weight sync; async (4 engines + 4 trainers,
  the one-node split) = the longer of the two + the sync's pause.
Decode is given three times: as measured with Hugging Face eager decoding (launch-bound: a floor on vLLM's rate),
as measured with each step replayed as one CUDA graph over a static cache read once a step (how vLLM decodes,
without its paged attention; present when gpu_split.json has it), and at the memory-bandwidth bound (the weights
and the batch's cached keys and values read once a decode step, at the measured copy bandwidth: a ceiling).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
from pathlib import Path
from typing import Any

from benchmarks.tables import save
from searchrl.paths import CONFIGS, ROOT
from searchrl.stage.config import load_stage

RESULTS = ROOT / "benchmarks/results"
TRAJECTORIES = ROOT / "tests/fixtures/r1searcher/bamboogle_llama.jsonl"
STAGE2 = CONFIGS / "stages/stage2_answer.yaml"
DOCS = re.compile(r"<\|begin_of_documents\|>.*?<\|end_of_documents\|>", re.S)
EPISODES_PER_STEP = 64 * 16
PROMPT_TOKENS = 200
NODE_GPUS = 8
GRAPHS_LABEL = "measured (CUDA graphs)"


def episode_shape(path: Path = TRAJECTORIES) -> dict[str, float]:
    """Searches, policy tokens and document tokens per episode of the released trajectories."""
    rows = [json.loads(line)["gen_text_store"] for line in path.open(encoding="utf-8")]
    policy = [len(DOCS.sub("", t)) / 4 for t in rows]
    docs = [sum(len(d) for d in DOCS.findall(t)) / 4 for t in rows]
    searches = [t.count("<|begin_of_query|>") for t in rows]
    return {
        "trajectories": len(rows),
        "searches_mean": statistics.fmean(searches),
        "searches_max": max(searches),
        "policy_tokens_mean": statistics.fmean(policy),
        "policy_tokens_max": max(policy),
        "document_tokens_mean": statistics.fmean(docs),
    }


def gpu_rates(gpu: dict[str, Any], context_tokens: float) -> dict[str, float]:
    train = gpu["train"]
    decodes = [d for d in gpu["decode"]["runs"] if "decode_tokens_per_s" in d]
    widest = max(decodes, key=lambda d: d["batch"])
    sync = gpu["sync"]
    cfg = gpu["model"]["config"]
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_bytes_per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2  # K and V, bf16
    # One decode step reads every weight and every row's cached keys and values once; a device-to-device copy
    # reads and writes each byte, so the bandwidth is twice its rate.
    step_bytes = sync["bytes_bf16"] + widest["batch"] * context_tokens * kv_bytes_per_token
    bound_step_s = step_bytes / (2 * sync["device_to_device"]["gb_per_s"] * 1e9)
    graphed = [d for d in gpu.get("decode_graphs", {}).get("runs", []) if d.get("batch") == widest["batch"]]
    extra = {}
    if graphed and "ms_per_step" in graphed[0]:
        extra["decode_step_s_graphs"] = graphed[0]["ms_per_step"] / 1000
    return {
        **extra,
        "train_tokens_per_s": train["forward_backward"]["tokens_per_s"],
        "logprob_tokens_per_s": train["forward_no_grad"]["tokens_per_s"],
        "prefill_tokens_per_s": statistics.fmean(d["prefill_tokens_per_s"] for d in decodes),
        "decode_batch": widest["batch"],
        "decode_step_s_measured": widest["ms_per_step"] / 1000,
        "decode_step_s_bound": bound_step_s,
        "kv_bytes_per_token": kv_bytes_per_token,
        "decode_context_tokens": context_tokens,
    }


def step_times(shape: dict[str, float], rates: dict[str, float], latency_s: float, decode_step_s: float,
               sync_s: float, critical_searches: float) -> dict[str, float]:  # fmt: skip
    """Seconds per rollout step, colocated sync on all GPUs against async on half for each side."""
    tokens = shape["policy_tokens_mean"] + shape["document_tokens_mean"] + PROMPT_TOKENS
    batch_tokens = EPISODES_PER_STEP * tokens
    per_token = 1 / rates["train_tokens_per_s"] + 2 / rates["logprob_tokens_per_s"]
    decode_rate = rates["decode_batch"] / decode_step_s
    prefill = EPISODES_PER_STEP * (tokens - shape["policy_tokens_mean"]) / rates["prefill_tokens_per_s"]
    decode = EPISODES_PER_STEP * shape["policy_tokens_mean"] / decode_rate
    critical = shape["policy_tokens_max"] * decode_step_s + critical_searches * latency_s

    def generation(gpus: int) -> float:
        return max((prefill + decode) / gpus, critical)

    def training(gpus: int) -> float:
        return batch_tokens * per_token / gpus

    half = NODE_GPUS // 2
    sync = generation(NODE_GPUS) + training(NODE_GPUS) + sync_s
    async_ = max(generation(half), training(half)) + sync_s
    return {
        "generation_8_s": generation(NODE_GPUS),
        "critical_path_s": critical,
        "training_8_s": training(NODE_GPUS),
        "sync_step_s": sync,
        "async_4_4_step_s": async_,
        "async_over_sync": sync / async_,
    }


def crossover_latency(shape: dict[str, float], rates: dict[str, float], decode_step_s: float, sync_s: float,
                      chain: float, most_s: float = 60.0) -> float | None:  # fmt: skip
    """The search latency from which async on the split node makes more steps an hour than colocated sync."""
    ratio = lambda lat: step_times(shape, rates, lat, decode_step_s, sync_s, chain)["async_over_sync"]  # noqa: E731
    if ratio(most_s) < 1:
        return None
    low, high = 0.0, most_s
    while high - low > 0.01:
        low, high = (low, (low + high) / 2) if ratio((low + high) / 2) >= 1 else ((low + high) / 2, high)
    return round(high, 2)


def project(gpu: dict[str, Any], cpu: dict[str, Any], latencies: list[float], sync_s: float) -> dict[str, Any]:
    shape = episode_shape()
    # A decoding row holds, on average over its episode, the prompt and half of its documents and tokens.
    context = PROMPT_TOKENS + (shape["document_tokens_mean"] + shape["policy_tokens_mean"]) / 2
    rates = gpu_rates(gpu, context)
    # The CPU run's generation grew by this many search latencies a step: the batch's longest chain of searches.
    by = {(r["latency_s"], r["schedule"]): r["mean_step_split_s"]["generation"] for r in cpu["runs"]}
    top = max(lat for lat, s in by if s == "sync")
    measured_chain = (by[(top, "sync")] - by[(0.0, "sync")]) / top
    # A batch of 1,024 episodes holds some at the search cap: its longest chain is the stage file's cap.
    chain = max(measured_chain, float(load_stage(STAGE2)[0].episode.max_searches))
    rows, crossover = [], {}
    decodes = [("measured (HF eager)", rates["decode_step_s_measured"])]
    if "decode_step_s_graphs" in rates:
        decodes.append((GRAPHS_LABEL, rates["decode_step_s_graphs"]))
    decodes.append(("bandwidth bound", rates["decode_step_s_bound"]))
    for decode_label, step_s in decodes:
        for latency in latencies:
            t = step_times(shape, rates, latency, step_s, sync_s, chain)
            rows.append({"decode": decode_label, "latency_s": latency, **{k: round(v, 2) for k, v in t.items()}})
        crossover[decode_label] = crossover_latency(shape, rates, step_s, sync_s, chain)
    return {
        "date": dt.date.today().isoformat(),
        "machine": f"computed here from figures measured on one {gpu['machine']['device_name']}",
        "gpu": {"machine": gpu.get("machine"), "source": "benchmarks/results/gpu_split.json", "date": gpu.get("date")},
        "rates": {k: round(v, 4) for k, v in rates.items()},
        "episode_shape": {k: round(v, 1) for k, v in shape.items()},
        "episodes_per_step": EPISODES_PER_STEP,
        "prompt_tokens": PROMPT_TOKENS,
        "sync_s": sync_s,
        "critical_chain": {"measured_cpu": round(measured_chain, 2), "used": chain},
        "rows": rows,
        "crossover_latency_s": crossover,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.async_projection", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", type=Path, default=RESULTS / "gpu_split.json", help="benchmarks/gpu_split.py's output")
    p.add_argument("--cpu", type=Path, default=RESULTS / "async_rollout.json", help="benchmarks/async_rollout.py's")
    p.add_argument("--latencies", default="0,0.5,2,3", help="seconds per search call, comma-separated")
    p.add_argument("--sync-s", type=float, default=5.0, help="assumed weight-sync pause per step (not measured)")
    p.add_argument("--out", type=Path, default=RESULTS / "async_projection.json")
    args = p.parse_args(argv)
    gpu, cpu = (json.loads(f.read_text(encoding="utf-8")) for f in (args.gpu, args.cpu))
    result = project(gpu, cpu, [float(x) for x in args.latencies.split(",")], args.sync_s)
    for r in result["rows"]:
        print(f"{r['decode']:<20} latency {r['latency_s']:>4} s: generation {r['generation_8_s']:>6.1f} s "
              f"(critical path {r['critical_path_s']:.1f}), training {r['training_8_s']:.1f} s; sync step "
              f"{r['sync_step_s']:.1f} s, async 4+4 {r['async_4_4_step_s']:.1f} s: "
              f"{r['async_over_sync']:.2f}x")  # fmt: skip
    for label, x in result["crossover_latency_s"].items():
        print(f"async 4+4 overtakes colocated sync ({label}) from {x if x is not None else 'no'} s a search")
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
