"""Dense, BM25 and hybrid retrieval on kiltmini: recall of R1-Searcher's BGE-large top-1, and queries/s.

    python -m benchmarks.hybrid --index DIR --queries kiltmini/queries.jsonl [--out FILE]

DIR is an index directory built from kiltmini's passages.jsonl with `--bm25` (default model). The target of
each query is `ranked_ids[0]`, the passage R1-Searcher's BGE-large + Flat retriever ranked first over all of
KILT. Hybrid runs with the default fusion settings (HybridConfig); a sweep of BM25 weight and rrf_k is
reported beside it, for information only (choosing the best of the sweep on the same queries would overfit).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from searchrl.paths import ROOT  # noqa: E402
from searchrl.search.bm25 import BM25Backend  # noqa: E402
from searchrl.search.hybrid import HybridBackend, rrf_fuse  # noqa: E402
from searchrl.search.index_settings import HybridConfig  # noqa: E402
from searchrl.search.local_faiss import LocalFaissBackend  # noqa: E402

KS = (1, 3, 5, 10)
BATCH = 64


def recall(rows: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    return {
        f"@{k}": round(float(np.mean([t >= 0 and t in r[:k] for t, r in zip(targets, rows, strict=True)])), 4)
        for k in KS
    }


def rate(search, texts: list[str]) -> float:
    search(texts[:BATCH], 10)
    started = time.perf_counter()
    for i in range(0, len(texts), BATCH):
        search(texts[i : i + BATCH], 10)
    return len(texts) / (time.perf_counter() - started)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True, help="kiltmini index directory built with --bm25")
    p.add_argument("--queries", type=Path, required=True, help="kiltmini queries.jsonl (query, ranked_ids)")
    p.add_argument("--rate-queries", type=int, default=512, help="queries timed for queries/s")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "hybrid.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    queries = [json.loads(line) for line in args.queries.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [q["query"] for q in queries]
    dense = LocalFaissBackend(args.index)
    lexical = BM25Backend(args.index)
    config = HybridConfig()
    hybrid = HybridBackend(dense, lexical, config)
    row_of = {dense.store[r].id: r for r in range(len(dense.store))}
    targets = np.array([row_of.get(q["ranked_ids"][0], -1) for q in queries])
    depth = config.depth
    _, dense_rows = dense.search_rows(texts, depth)
    _, bm25_rows = lexical.search_rows(texts, depth)

    def fused(weight: float, rrf_k: float) -> np.ndarray:
        lists = rrf_fuse([dense_rows, bm25_rows], [config.dense_weight, weight], rrf_k, max(KS))
        return np.array([[r for r, _ in hits] + [-1] * (max(KS) - len(hits)) for hits in lists])

    timed = texts[: args.rate_queries]
    result = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "model": dense.manifest["model"],
        "index_type": dense.manifest["index_type"],
        "passages": len(dense.store),
        "queries": len(queries),
        "targets_in_corpus": int((targets >= 0).sum()),
        "hybrid_config": config.model_dump(),
        "recall_of_bge_top1": {
            "dense": recall(dense_rows, targets),
            "bm25": recall(bm25_rows, targets),
            "hybrid": recall(fused(config.bm25_weight, config.rrf_k), targets),
        },
        "sweep": [
            {"bm25_weight": w, "rrf_k": k, **recall(fused(w, k), targets)}
            for w in (0.3, 0.5, 0.7, 1.0, 1.5)
            for k in (10, 30, 60, 100)
        ],
        "queries_per_s_batch64": {
            "dense": round(rate(dense.search_sync, timed), 1),
            "bm25": round(rate(lexical.search_sync, timed), 1),
            "hybrid": round(rate(hybrid.search_sync, timed), 1),
        },
    }
    for name, figures in result["recall_of_bge_top1"].items():
        print(name, json.dumps(figures), flush=True)
    print("queries/s", json.dumps(result["queries_per_s_batch64"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
