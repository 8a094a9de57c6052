"""Shrink on import: a Flat FAISS file re-built as the compact type from its own vectors, against serving it as is.

    python -m benchmarks.import_index [--n 200000] [--dim 768] [--queries 500] [--work-dir DIR] [--out FILE]

Synthetic data (stated as such): unit vectors drawn around cluster centres in a low-dimensional latent space plus
noise, as benchmarks/scale.py draws them, written as a Flat inner-product FAISS file the way Search-R1's
index_builder.py writes one. The conversion `searchrl index import --index-type compact` runs (the stored vectors
read back a shard at a time into fp16 shards, then IVF-PQ trained and filled from them) runs in a process of its
own, for its peak memory; each index is then opened in a fresh process, as a server opens it, for its resident
memory, queries/s (batch 64) and recall@10 against the Flat file's exact top-10. The row check against an encoder
is skipped: these vectors come from no model. Memory is projected to Search-R1's 21M x 768 and KILT's 25M x 1024
from bytes per vector.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.scale import CENTRES, LATENT, rss, synthetic
from benchmarks.tables import save
from searchrl.paths import ROOT
from searchrl.search.index.index_types import compact_code_size
from searchrl.search.index_settings import DEFAULT_RERANK_DEPTH

PROJECTIONS = {"search-r1 e5 (21M x 768)": (21_000_000, 768), "KILT bge-large (25M x 1024)": (25_000_000, 1024)}


def make_flat(work: Path, n: int, dim: int, n_queries: int) -> Path:
    from searchrl.search.index.faiss_import import faiss

    path = work / f"flat_{n}_{dim}.index"
    if path.is_file() and (work / "queries.npy").is_file():
        return path
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((CENTRES, LATENT), dtype=np.float32)
    lift = rng.standard_normal((LATENT, dim), dtype=np.float32) / np.sqrt(LATENT)
    index = faiss.IndexFlatIP(dim)
    for lo in range(0, n, 100_000):
        index.add(synthetic(rng, min(100_000, n - lo), centres, lift).astype(np.float32))
    np.save(work / "queries.npy", synthetic(rng, n_queries, centres, lift).astype(np.float32))
    faiss.write_index(index, str(path))
    return path


def convert(flat: Path, out: Path, shard_size: int, train_size: int) -> dict:
    """What the import does after its row check: shards from the stored vectors, then the compact index."""
    from searchrl.search.index.build import build_vector_index
    from searchrl.search.index.faiss_index import effective_factory
    from searchrl.search.index.importer import read_mapped, shards_from
    from searchrl.search.index.index_types import default_factory

    before = rss()
    started = time.perf_counter()
    index = read_mapped(flat)
    shards = shards_from(index, out, shard_size, {"synthetic": str(flat)})
    shards_s = time.perf_counter() - started
    factory = effective_factory(default_factory("compact", index.d, index.ntotal), index.ntotal)
    started = time.perf_counter()
    built, _ = build_vector_index(out, shards, index.d, "compact", factory, "cpu", train_size, "synthetic")
    return {
        "factory": factory,
        "shards_seconds": round(shards_s, 1),
        "compact_build_seconds": round(time.perf_counter() - started, 1),
        "peak_rss_bytes": rss()["VmHWM"] - before["VmRSS"],
        "flat_file_bytes": flat.stat().st_size,
        "compact_index_bytes": built["bytes"],
        "shard_bytes": sum(p.stat().st_size for p in shards),
    }


def recall_at_10(rows: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(t) & set(r)) / 10 for t, r in zip(truth, rows, strict=True)]))


def serve(kind: str, flat: Path, out: Path, work: Path) -> dict:
    """Open one index as the server does (a fresh process): resident memory, q/s, recall@10 against Flat."""
    import faiss

    from searchrl.search.index.rerank_index import RerankIndex
    from searchrl.search.index.shards import EmbeddingShards

    queries, truth = np.load(work / "queries.npy"), np.load(work / "truth.npy")
    before = rss()
    if kind == "flat":
        index = faiss.read_index(str(flat))
    else:
        base = faiss.read_index(str(out / "index.faiss"))
        faiss.extract_index_ivf(base).nprobe = 64
        index = RerankIndex(base, EmbeddingShards(sorted((out / "embeddings").glob("shard_*.npy"))),
                            DEFAULT_RERANK_DEPTH)  # fmt: skip
    loaded = rss()
    index.search(queries[:64], 10)
    started = time.perf_counter()
    rows = np.concatenate([index.search(queries[i : i + 64], 10)[1] for i in range(0, len(queries), 64)])
    seconds = time.perf_counter() - started
    return {
        "resident_bytes": loaded["RssAnon"] - before["RssAnon"],
        "queries_per_s_batch64": round(len(queries) / seconds, 1),
        "recall_at_10_vs_flat": round(recall_at_10(rows, truth), 4),
    }


def in_process(step: str, args: argparse.Namespace) -> dict:
    options = {"--n": args.n, "--dim": args.dim, "--queries": args.queries, "--shard-size": args.shard_size,
               "--train-size": args.train_size, "--work-dir": args.work_dir}  # fmt: skip
    cmd = [sys.executable, "-m", "benchmarks.import_index", "--step", step]
    cmd += [str(x) for pair in options.items() for x in pair]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{step} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200_000, help="vectors in the Flat file")
    p.add_argument("--dim", type=int, default=768, help="their dimension (e5-base-v2's 768 by default)")
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--shard-size", type=int, default=100_000)
    p.add_argument("--train-size", type=int, default=100_000, help="vectors sampled to train IVF and PQ")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/searchrl-bench/import_index"))
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/import_index.json")
    p.add_argument("--step", choices=["convert", "flat", "compact"], help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    work, out = args.work_dir, args.work_dir / "compact"
    flat = work / f"flat_{args.n}_{args.dim}.index"
    if args.step:
        step = {"convert": lambda: convert(flat, out, args.shard_size, args.train_size)}.get(args.step)
        print(json.dumps(step() if step else serve(args.step, flat, out, work)))
        return 0
    from searchrl.search.index.faiss_import import faiss

    work.mkdir(parents=True, exist_ok=True)
    make_flat(work, args.n, args.dim, args.queries)
    _, truth = faiss.read_index(str(flat)).search(np.load(work / "queries.npy"), 10)
    np.save(work / "truth.npy", truth)
    result: dict = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "faiss": faiss.__version__},
        "data": f"synthetic clustered unit vectors ({CENTRES} centres, {LATENT}-d latent), {args.n:,} x {args.dim}",
        "n": args.n,
        "dim": args.dim,
        "queries": args.queries,
        "train_size": args.train_size,
        "rerank_depth": DEFAULT_RERANK_DEPTH,
        "nprobe": 64,
    }
    result["conversion"] = in_process("convert", args)
    print(json.dumps(result["conversion"]), flush=True)
    result["serve"] = {kind: in_process(kind, args) for kind in ("flat", "compact")}
    print(json.dumps(result["serve"]), flush=True)
    per_vector = {k: v["resident_bytes"] / args.n for k, v in result["serve"].items()}
    code = compact_code_size(args.dim) + 8
    result["resident_ratio_compact_to_flat"] = round(per_vector["compact"] / per_vector["flat"], 4)
    result["projection"] = {
        name: {
            "flat_gib": round(n * 4 * d / 2**30, 1),
            "compact_gib": round(n * per_vector["compact"] * (compact_code_size(d) + 8) / code / 2**30, 2),
            "fp16_shards_on_disk_gib": round(n * 2 * d / 2**30, 1),
        }
        for name, (n, d) in PROJECTIONS.items()
    }
    print(json.dumps(result["projection"]), flush=True)
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
