"""The CPU encoder backends on kiltmini: int8 ONNX's recall@10 against fp32, and each backend's lone-query rate.

    python -m benchmarks.encoder_backends --kiltmini DIR [--work-dir DIR] [--out FILE]

Two Flat indexes of kiltmini's passages are built, one by fp32 ONNX Runtime (the CPU default, `auto`) and one by
int8 (`onnx-int8`). Each answers kiltmini's real queries encoded by its own backend, as a server started with that
backend on an index built with it would. recall@10 is the share of fp32's top-10 that int8's top-10 holds; the
PyTorch encoder's queries are also run against the fp32 index (the passages' vectors differ from PyTorch's by under
1e-5, tested in tests/test_onnx_encoder.py). Lone-query rates alternate between the backends for `--rounds` rounds
in one process, so that a shared machine's load hits each alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.tables import save  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.search.encode.encoder import Encoder  # noqa: E402
from searchrl.search.index.build import build  # noqa: E402
from searchrl.search.local_faiss import LocalFaissBackend  # noqa: E402

BACKENDS = ("onnx", "onnx-int8", "torch")
K = 10


def overlap_at_k(rows: np.ndarray, reference: np.ndarray, k: int = K) -> float:
    """Mean share of each reference top-k that rows' top-k holds."""
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(rows, reference, strict=True)]))


def target_recall(rows: np.ndarray, targets: np.ndarray, k: int) -> float:
    return float(np.mean([t >= 0 and t in r[:k] for r, t in zip(rows, targets, strict=True)]))


def lone_query_rates(encoders: dict[str, Encoder], queries: list[str], rounds: int, seconds: float) -> dict:
    rates: dict[str, list[float]] = {name: [] for name in encoders}
    for r in range(rounds):
        names = list(encoders) if r % 2 == 0 else list(encoders)[::-1]
        for name in names:
            done, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                encoders[name].encode_queries([queries[done % len(queries)]])
                done += 1
            rates[name].append(round(done / (time.perf_counter() - started), 1))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]} q/s" for n, v in rates.items()), flush=True)
    return {
        "queries_per_s": rates,
        "median_queries_per_s": {n: statistics.median(v) for n, v in rates.items()},
        "median_ratio_to_torch": {
            n: round(statistics.median(a / b for a, b in zip(v, rates["torch"], strict=True)), 2)
            for n, v in rates.items()
        },
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiltmini", type=Path, required=True, help="directory with passages.jsonl and queries.jsonl")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/searchrl-bench/encoder_backends"))
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "encoder_backends.json")
    p.add_argument("--rounds", type=int, default=5, help="alternating lone-query blocks per backend")
    p.add_argument("--seconds", type=float, default=3.0, help="length of one lone-query block")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    queries = [json.loads(line) for line in (args.kiltmini / "queries.jsonl").open(encoding="utf-8") if line.strip()]
    texts = [q["query"] for q in queries]
    searched: dict[str, np.ndarray] = {}
    builds: dict[str, dict] = {}
    backends: dict[str, LocalFaissBackend] = {}
    for backend in ("onnx", "onnx-int8"):
        out = args.work_dir / backend
        manifest = build(args.kiltmini / "passages.jsonl", "jsonl", out, encoder_backend=backend, shard_size=1000)
        builds[backend] = {"encode_seconds": manifest["build"]["encode_seconds"]}
        backends[backend] = LocalFaissBackend(out, encoder_backend=backend)
        if backends[backend].encoder.backend != backend:
            raise SystemExit(f"{backend}: the encoder fell back to {backends[backend].encoder.backend}")
        _, searched[backend] = backends[backend].index.search(backends[backend].encoder.encode_queries(texts), K)
    fp32 = backends["onnx"]
    torch_encoder = Encoder(fp32.encoder.model_name, backend="torch")
    _, searched["torch"] = fp32.index.search(torch_encoder.encode_queries(texts), K)
    row_of = {fp32.store[r].id: r for r in range(len(fp32.store))}
    targets = np.array([row_of.get(q["ranked_ids"][0], -1) for q in queries])
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch_threads": torch.get_num_threads()},
        "model": fp32.encoder.model_name,
        "passages": len(fp32.store),
        "queries": len(texts),
        "k": K,
        "onnx_check": {b: backends[b].encoder.onnx_check for b in backends},
        "build": builds,
        "recall_at_10_vs_fp32": {b: round(overlap_at_k(searched[b], searched["onnx"]), 4) for b in searched},
        "same_top_10_vs_fp32": {
            b: round(float(np.mean(np.all(searched[b] == searched["onnx"], axis=1))), 4) for b in searched
        },
        "r1_top1_recall": {
            b: {f"@{k}": round(target_recall(rows, targets, k), 4) for k in (1, 3, 10)} for b, rows in searched.items()
        },
    }
    print(json.dumps(result, indent=1), flush=True)
    encoders = {"onnx": fp32.encoder, "onnx-int8": backends["onnx-int8"].encoder, "torch": torch_encoder}
    result["lone_query"] = lone_query_rates(encoders, texts, args.rounds, args.seconds)
    print(json.dumps(result["lone_query"]), flush=True)
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
